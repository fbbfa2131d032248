"""The pages a reader follows hold together: README.md stays short (at most 250 lines), every relative link in
README.md, docs/*.md and bench/README.md reaches a file of the repository (and a heading of it where the link
names one, as GitHub slugs headings), and the README's headline tables are the cards' and the study's numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(text: str) -> str:
    """The page without its fenced code blocks (a link or a heading inside one is code, not markdown)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped (letters, digits, `_`, `-` and
    spaces kept), spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors by its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor on a page; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose(page.read_text()).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        base = slug(heading.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slugs_are_githubs():
    assert slug("The paper's own scale: `--preset paper --recipe paper`") == \
        "the-papers-own-scale---preset-paper---recipe-paper"
    assert slug("When does SPT/LSA pay off? The small-data curve") == "when-does-sptlsa-pay-off-the-small-data-curve"
    assert slug("Fine-tune speed (`bench/finetune_speed.py`)") == "fine-tune-speed-benchfinetune_speedpy"
    assert slug("Models from the keras.io example") == "models-from-the-kerasio-example"


def test_the_readme_is_at_most_250_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move a subject into a page under docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    links = LINK.findall(prose(page.read_text()))
    broken = []
    for target in links:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not a file of this repository
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists() or ROOT.resolve() not in [where, *where.parents]:
            broken.append(f"{target}: no such file")
        elif anchor and (where.suffix != ".md" or anchor not in anchors(where)):
            broken.append(f"{target}: no heading #{anchor} in {where.relative_to(ROOT.resolve())}")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_is_a_stub(page):
    text = page.read_text()
    assert "TODO" not in text and "TBD" not in text, f"{page.relative_to(ROOT)} holds a TODO"
    assert len(prose(text).split()) > 100, f"{page.relative_to(ROOT)} says almost nothing"


def _card(name: str) -> dict:
    return json.loads((ROOT / "checkpoints" / name / "explorer.json").read_text())


def test_the_readme_headline_tables_are_the_cards_and_the_study():
    readme = README.read_text()
    for name in ("cifar10-vanilla", "cifar10-spt_lsa"):  # the shipped pair: parameters, test top-1 and top-5
        card = _card(name)
        row = re.search(rf"^\| `{name}` \|.*$", readme, re.M)
        assert row, f"README.md's shipped-pair table has no row for {name}"
        for cell in (f"{card['parameters']:,}", f"**{100 * card['metrics']['test_top1']:.2f} %**",
                     f"{100 * card['metrics']['test_top5']:.2f} %"):
            assert f"| {cell} |" in row.group(0), (name, cell, row.group(0))
    vit = _card("cifar10-vanilla")["metrics"]["test_top1"]
    for name, label in (("cifar10-vanilla", "ViT"), ("cifar10-lsa", "LSA alone"), ("cifar10-spt", "SPT alone"),
                        ("cifar10-spt_lsa", "SPT + LSA")):  # the 2x2 grid, each corner's gain over the ViT
        top1 = _card(name)["metrics"]["test_top1"]
        gain = "" if name == "cifar10-vanilla" else f" ({100 * (top1 - vit):+.2f})"
        cell = f"{label}: **{100 * top1:.2f} %**{gain}"
        assert f"| {cell} |" in readme, cell
    # each shipped paper-scale model (checkpoints/paper): its test top-1 beside its reference
    for folder in sorted((ROOT / "checkpoints" / "paper").glob("*/explorer.json")):
        top1 = json.loads(folder.read_text())["metrics"]["test_top1"]
        assert f"`paper/{folder.parent.name}` **{100 * top1:.2f} %**" in readme, folder.parent.name

    from explorer.study import report as study_report
    from explorer.study.report import read_results
    rows = read_results(ROOT / "study" / "results.csv")
    means, gaps = study_report.summary(rows), study_report.paired_gaps(rows)
    expected = []
    for n, gap in gaps.items():
        low, high = study_report.interval(gap["gaps"])
        expected.append(f"| {n:,} | {100 * means[(n, 'vanilla')]['mean']:.2f} % | "
                        f"{100 * means[(n, 'spt_lsa')]['mean']:.2f} % | {100 * gap['mean']:+.2f} | "
                        f"{100 * low:+.2f} to {100 * high:+.2f} |")
    shown = re.findall(r"^\| [\d,]+ \| [\d.]+ % \| [\d.]+ % \| .*$", readme, re.M)
    assert shown == expected, "README.md's small-data table: the study's means, gaps and intervals"


def test_the_readme_three_settings_are_the_shipped_measurements():
    """The README's answer at three settings is settings_table of the numbers the app ships (the Small data tab
    says the same): `python -m explorer.study mechanisms` rewrites it between its markers."""
    from explorer.study import mechanisms
    from explorer.study.report import read_results
    rows = mechanisms.read_csv(ROOT / "checkpoints" / "study" / "mechanisms.csv")
    table = mechanisms.settings_table(rows, read_results(ROOT / "checkpoints" / "study" / "results.csv"))
    for page in (README, ROOT / "docs" / "results.md"):
        text = page.read_text()
        assert mechanisms.BEGIN in text and mechanisms.with_settings(text, table) == text, (
            f"{page.name}'s three settings: rerun `python -m explorer.study mechanisms`")
    assert table.count("\n") == 4 and "2.7 M, the paper's recipe at the paper's scale" in table
