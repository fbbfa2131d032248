"""The Attention tab at the paper's scale, in a real browser on copies of the shipped checkpoints: one click puts the
paper-scale pair in the slots on both first layers, and one layer's 12 heads of each model stay legible at 1280 and
800 px (each tile 60 css px or more, nothing wider than the window). Takes docs/attention-paper.png and
docs/attention-paper-800.png (into docs/ with RETAKE_DOCS_PICTURES=1: tests.helpers.docs_picture)."""

from __future__ import annotations

import pytest

from explorer.ui.attention import SELF_HEAD_LABEL
from tests.e2e.pages import open_tab, visit
from tests.helpers import docs_picture, scaled

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]
pytest.importorskip("playwright")  # a machine without playwright still collects the suite

# The maps' picture: its shown width over its own, and the page's width against the window's.
SHOWN = """() => { const i = document.querySelector('#maps img');
    return {natural: i.naturalWidth, shown: i.getBoundingClientRect().width,
            page: document.documentElement.scrollWidth, window: window.innerWidth}; }"""
FIRST_LAYERS = "Layer 0 of 9 (the first) for A, layer 0 of 9 (the first) for B"


@pytest.mark.parametrize("width", [1280, 800])
def test_the_paper_pairs_heads_stay_legible(browser, shipped_app, width, tmp_path):
    from explorer.app.attention import TILE
    page = visit(browser, shipped_app[0], width, height=1000)
    open_tab(page, "Attention")
    page.get_by_role("button", name=SELF_HEAD_LABEL).click()
    # Both slots load, each redraws the tab, and the dropdowns follow: wait until all of it has settled on the
    # paper pair's first layers, with the new picture (two models of 3 tiles to a row and their colour bars).
    settled = (f"() => document.querySelector('#attn-caption').innerText.includes({FIRST_LAYERS!r})"
               f" && (document.querySelector('#maps img') || {{}}).naturalWidth > {6 * TILE}"
               f" && !document.querySelector('.tabitem:not([style*=none]) .eta-bar, .generating, .pending')")
    page.wait_for_function(settled, timeout=scaled(240_000))
    page.wait_for_timeout(3000)
    page.wait_for_function(settled, timeout=scaled(120_000))
    caption = page.inner_text("#attn-caption")
    assert "most self-attending head" in caption and "LSA masks it" in caption, caption
    assert page.input_value("#layer-a input") == "0"
    shown = page.evaluate(SHOWN)
    scale = shown["shown"] / shown["natural"]
    assert TILE * scale >= 60, shown  # each tile shown 60 css px or more
    assert shown["page"] <= shown["window"], shown  # no horizontal scroll
    # From the tab's row of controls to the maps' bottom, in page coordinates.
    top, bottom = page.evaluate("""() => [document.querySelector('#picker-hint').getBoundingClientRect().top - 50,
        document.querySelector('#maps').getBoundingClientRect().bottom].map((y) => y + window.scrollY)""")
    name = "attention-paper.png" if width == 1280 else f"attention-paper-{width}.png"
    page.screenshot(path=str(docs_picture(name, tmp_path)), full_page=True,
                    clip={"x": 0, "y": top, "width": width, "height": bottom - top})
    if width == 1280:  # B's own layer, chosen on the page, redraws B alone at it
        box = page.locator("#layer-b input")
        box.fill("8")
        page.wait_for_timeout(300)
        box.press("Enter")
        page.wait_for_function("() => document.querySelector('#attn-caption').innerText"
                               ".includes('for A, layer 8 of 9 (the last) for B')", timeout=scaled(60_000))
    page.close()


def drawn_picture(page) -> dict:
    """Where the picker's picture is drawn on the page, read from its pixels (not from the CSS the outline's
    script reads): the tight box of what differs from its img box's border colour, outline hidden."""
    import io

    import numpy as np
    from PIL import Image
    hide = "(v) => { const o = document.querySelector('#picker .query-outline'); if (o) o.style.visibility = v; }"
    page.evaluate(hide, "hidden")
    img = page.locator("#picker img").first
    box = img.bounding_box()
    shot = np.asarray(Image.open(io.BytesIO(img.screenshot())).convert("RGB")).astype(int)
    page.evaluate(hide, "")
    border = np.concatenate([shot[0], shot[-1], shot[:, 0], shot[:, -1]])
    colours, counts = np.unique(border, axis=0, return_counts=True)
    background = colours[np.argmax(counts)]
    differs = np.abs(shot - background).sum(axis=-1) > 24
    # the picture's rows and columns: mostly unlike the background (a small icon in a corner is not)
    rows, cols = np.flatnonzero(differs.mean(axis=1) > 0.3), np.flatnonzero(differs.mean(axis=0) > 0.3)
    scale = box["width"] / shot.shape[1]  # screenshot pixels per css pixel (1 here)
    return {"left": box["x"] + cols.min() * scale, "top": box["y"] + rows.min() * scale,
            "right": box["x"] + (cols.max() + 1) * scale, "bottom": box["y"] + (rows.max() + 1) * scale}


OUTLINE = """() => { const o = document.querySelector('#picker .query-outline');
    if (!o || o.style.display !== 'block') return null;
    const r = o.getBoundingClientRect(); return {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; }"""


@pytest.mark.parametrize("width", [1280, 800])
def test_the_query_outline_covers_the_clicked_corner_patch_of_the_picture(browser, tiny_pair_app, width):
    """A click on the picture's top-left and bottom-right patches outlines exactly that patch of the picture
    as drawn (found in its pixels), and the query fields hold whole pixels."""
    page = visit(browser, tiny_pair_app[0], width, height=1000)
    open_tab(page, "Attention")
    page.locator("#picker img").first.wait_for(timeout=scaled(30_000))
    page.locator("#picker img").first.scroll_into_view_if_needed()
    page.wait_for_function(f"() => ({OUTLINE})() !== null", timeout=scaled(30_000))
    pic = drawn_picture(page)
    side = pic["right"] - pic["left"]
    assert abs(side - (pic["bottom"] - pic["top"])) <= 2, pic
    step = side / 4  # the tiny models' 4 x 4 grid
    for row, (x, y) in ((0, (pic["left"] + 3, pic["top"] + 3)), (3, (pic["right"] - 3, pic["bottom"] - 3))):
        page.mouse.click(x, y)
        page.wait_for_function(f"() => /row {row}, col {row}/.test(document.querySelector('#attn-caption')"
                               f".innerText)", timeout=scaled(30_000))
        want = {"left": pic["left"] + row * step, "top": pic["top"] + row * step}
        want.update(right=want["left"] + step, bottom=want["top"] + step)
        page.wait_for_function(
            f"(w) => {{ const o = ({OUTLINE})(); "
            f"return o && Object.keys(w).every((k) => Math.abs(o[k] - w[k]) < 2.5); }}", arg=want,
            timeout=scaled(10_000))
        for box in ("#query-y input", "#query-x input"):
            value = page.input_value(box)
            assert float(value) == int(float(value)), value
    page.close()
