"""What the browser tests do to a page and read from it: a visit that waits for the first analysis, a tab
opened by its name, and the open tab's pictures and tables measured."""

from __future__ import annotations

# The first analysis of the image the page opens with has been shown.
DONE = "() => /both say|disagree/.test((document.querySelector('#verdict') || {}).innerText || '')"


def visit(browser, url, width, height=900):
    """A new page at `url` in a `width` x `height` window, once its first analysis is shown."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url)
    page.wait_for_function(DONE, timeout=90_000)
    return page


def open_tab(page, name):
    """A tab by its name; in a narrow window Gradio keeps some behind its "More tabs" menu."""
    tab = page.get_by_role("tab", name=name)
    if tab.count() and tab.is_visible():
        tab.click()
    else:
        page.click("button[aria-label='More tabs']")
        page.locator(".overflow-dropdown button", has_text=name).click()


# What the open tab shows, measured: each picture's shown width over its own (pictures of 100 px or more;
# the image column's preview aside), and each table's right edge against its box's, the parts of it hidden
# behind a scroll, and its headers broken inside a word ("distan/ce": more lines than words and hyphens allow).
MEASURE = """() => {
    const shown = (e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
    const panel = [...document.querySelectorAll('[role=tabpanel]')].find(shown);
    const pictures = [...panel.querySelectorAll('img')].filter((i) => shown(i) && i.naturalWidth >= 100)
        .map((i) => ({id: (i.closest('[id]') || {}).id, natural: i.naturalWidth,
                      scale: i.getBoundingClientRect().width / i.naturalWidth}));
    const tables = [...panel.querySelectorAll('table')].filter(shown).map((t) => {
        const box = (t.closest('.block') || panel).getBoundingClientRect();
        const hidden = [t, ...t.querySelectorAll('*')].concat((() => { const up = []; let e = t.parentElement;
            while (e && e !== panel) { up.push(e); e = e.parentElement; } return up; })())
            .filter((e) => e.scrollWidth > e.clientWidth + 1 && (e.innerText || '').trim()
                && getComputedStyle(e).visibility !== 'hidden'
                && /auto|scroll|hidden/.test(getComputedStyle(e).overflowX))
            .map((e) => e.className || e.tagName);
        const broken = [...t.querySelectorAll('th')].filter(shown).map((th) => {
            // A dataframe's header text, without its sort button; a line break at a hyphen is no break.
            const range = document.createRange();
            range.selectNodeContents(th.querySelector('.header') || th);
            const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0)
                .map((r) => Math.round(r.top))).size;
            return {text: th.innerText.trim(), lines, words: th.innerText.trim().split(/[\\s-]+/).length};
        }).filter((h) => h.text && h.lines > h.words);
        return {id: (t.closest('[id]') || {}).id, right: t.getBoundingClientRect().right, box: box.right, hidden,
                broken};
    });
    return {pictures, tables};
}"""
