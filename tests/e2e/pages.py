"""What the browser tests do to a page and read from it: a visit that waits for the first analysis, a tab
opened by its name, and the open tab's pictures and tables measured."""

from __future__ import annotations

import io
import zipfile

from PIL import Image

from tests.helpers import scaled

# The first analysis of the image the page opens with has been shown.
DONE = "() => /both say|disagree/.test((document.querySelector('#verdict') || {}).innerText || '')"


def visit(browser, url, width, height=900):
    """A new page at `url` in a `width` x `height` window, once its first analysis is shown."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url)
    page.wait_for_function(DONE, timeout=scaled(90_000))
    return page


def open_tab(page, name):
    """A tab by its name; in a narrow window Gradio keeps some behind its "More tabs" menu."""
    tab = page.get_by_role("tab", name=name)
    if tab.count() and tab.is_visible():
        tab.click()
    else:
        page.click("button[aria-label='More tabs']")
        page.locator(".overflow-dropdown button", has_text=name).click()


def open_why(page, root):
    """The Small data tab's accordion on what LSA does to attention, by the heading the study's results in the
    app's checkpoint folder `root` give it (explorer.study.report.lsa_question)."""
    from explorer.study.report import lsa_question, read_results
    page.get_by_text(lsa_question(read_results(root / "study" / "results.csv"))).click()


def measure(page):
    """MEASURE on the open tab once its pictures have loaded (2.5 s) and every transition or animation that
    ends has ended (an accordion's turning triangle, a bar's width; 10 s at most, should one be held): the
    layout a visitor looks at, not one caught mid-move on a slow host."""
    page.wait_for_timeout(2500)
    page.evaluate("""async () => { await Promise.race([new Promise((done) => setTimeout(done, 10000)),
        Promise.all(document.getAnimations().filter((a) => a.playState === 'running' && a.effect
            && a.effect.getComputedTiming().endTime !== Infinity).map((a) => a.finished.catch(() => null)))]); }""")
    return page.evaluate(MEASURE)


# The words of an element's text (between spaces and hyphens: a line break at a hyphen is no break) that the
# browser broke across lines ("distan/ce", "deletio/n ↓").
SPLIT_WORDS = """(root) => {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    const split = [];
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const word of node.data.matchAll(/[^\\s-]+/g)) {
            const range = document.createRange();
            range.setStart(node, word.index);
            range.setEnd(node, word.index + word[0].length);
            const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0)
                .map((r) => Math.round(r.top))).size;
            if (lines > 1) split.push(word[0]);
        }
    }
    return split;
}"""

# What the open tab shows, measured: each picture's shown width over its own (pictures of 100 px or more;
# the image column's preview aside), and each table's right edge against its box's, the parts of it hidden
# behind a scroll, and its headers broken inside a word ("distan/ce", "deletio/n ↓").
MEASURE = """() => {
    const splitWords = SPLIT_WORDS;
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
        // A dataframe's header text, without its sort button.
        const broken = [...t.querySelectorAll('th')].filter(shown)
            .map((th) => ({text: th.innerText.trim(), split: splitWords(th.querySelector('.header') || th)}))
            .filter((h) => h.split.length);
        return {id: (t.closest('[id]') || {}).id, right: t.getBoundingClientRect().right, box: box.right, hidden,
                broken};
    });
    return {pictures, tables};
}""".replace("SPLIT_WORDS", SPLIT_WORDS)


UPLOAD = "input[type=file]:has(+ #upload-own)"


def slot_value(page, label):
    return page.locator(f'input[aria-label="{label}"]').input_value()


def slot_options(page, label):
    box = page.locator(f'input[aria-label="{label}"]')
    box.click()
    listbox = page.locator(f'#{box.get_attribute("aria-controls")}')
    listbox.wait_for(state="attached", timeout=10_000)
    options = [li.get_attribute("aria-label") or li.inner_text() for li in listbox.locator("li").all()]
    page.keyboard.press("Escape")
    return options


def choose(page, label, option):
    """Types `option` into the slot: the list narrows to it, and Enter picks it."""
    box = page.locator(f'input[aria-label="{label}"]')
    box.fill(option)
    page.wait_for_timeout(300)
    box.press("Enter")


# The innermost Markdown blocks that hold a text: each message once, however Gradio nests its blocks.
MESSAGES = """(mark) => [...document.querySelectorAll('.prose')]
    .filter((e) => e.innerText.includes(mark) && ![...e.querySelectorAll('.prose')]
        .some((c) => c.innerText.includes(mark)))
    .map((e) => e.innerText)"""


# Each picture's shown width over its own width (the Small data figures' measure of legibility).
SHOWN_SCALE = """(selector) => [...document.querySelectorAll(selector)].filter((i) => i.naturalWidth)
    .map((i) => i.getBoundingClientRect().width / i.naturalWidth)"""


# A table's headers never broken inside a word (SPLIT_WORDS), its last column on the page, and nothing of it
# hidden beyond a scroll.
TABLE_FITS = """(selector) => {
    const splitWords = SPLIT_WORDS;
    const table = document.querySelector(selector);
    const headers = [...table.querySelectorAll('th .header')].map((span) => ({text: span.innerText,
                                                                            split: splitWords(span)}));
    const ths = table.querySelectorAll('th');
    const scrollers = [...table.querySelectorAll('*')].filter((e) => e.scrollWidth > e.clientWidth + 1
        && /auto|scroll/.test(getComputedStyle(e).overflowX));
    return {headers, right: ths[ths.length - 1].getBoundingClientRect().right, width: window.innerWidth,
            hidden: scrollers.map((e) => e.className)};
}""".replace("SPLIT_WORDS", SPLIT_WORDS)


def assert_tau_legible(page) -> None:
    """The Tau tab as shown: both its pictures at 0.75 of their drawn width or more, the table's headers never
    broken inside a word, its last column on the page and nothing of it behind a scroll."""
    from tests.helpers import scaled
    plots = "#tau-plots img"
    page.locator("#tau-plots").scroll_into_view_if_needed()
    page.wait_for_function(f"(s) => ({SHOWN_SCALE})(s).length === 2", arg=plots, timeout=scaled(60_000))
    scales = page.evaluate(SHOWN_SCALE, plots)
    assert min(scales) >= 0.75, f"the tau plots are shown at {[f'{s:.0%}' for s in scales]}"
    fit = page.evaluate(TABLE_FITS, "#tau-table")
    broken = [h for h in fit["headers"] if h["split"]]
    assert not broken, f"headers broken inside a word: {broken}"
    assert fit["right"] <= fit["width"] and not fit["hidden"], fit


def class_zip_of(path, cifar10, classes, per_class):
    """A zip of `per_class` CIFAR-10 test images of each class, as a visitor uploads one (mine/<class>/)."""
    with zipfile.ZipFile(path, "w") as z:
        for c in classes:
            for i in [i for i, y in enumerate(cifar10.y_test) if y == cifar10.class_names.index(c)][:per_class]:
                buffer = io.BytesIO()
                Image.fromarray(cifar10.x_test[i]).save(buffer, format="PNG")
                z.writestr(f"mine/{c}/{i}.png", buffer.getvalue())
    return str(path)
