"""The maps a newcomer reads first say what the code holds: the README's Layout block names every module of
explorer/ (and nothing that is gone), and the lists in explorer/ui/__init__ and explorer/finetune/__init__ name
every module of their package."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPLORER = ROOT / "explorer"


def _layout_block() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("\n## Layout\n"):]
    return section[section.index("```") + 3:section.index("\n```", section.index("```") + 3)]


def _modules(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}


def test_the_readme_layout_names_every_module_and_nothing_that_is_gone():
    block = _layout_block()
    named = set(re.findall(r"explorer/([\w/]+\.py)", block))
    top = _modules(EXPLORER)
    missing = sorted(m for m in top if m not in named)
    assert not missing, f"README.md's Layout does not name explorer/{missing}"
    gone = sorted(n for n in named if not (EXPLORER / n).is_file())
    assert not gone, f"README.md's Layout names explorer/{gone}, which does not exist"
    for package in ("app", "convert", "finetune", "ui"):
        listed = re.search(rf"explorer/{package}/\s+(.*?)(?=\nexplorer/|\n\S|\Z)", block, re.S)
        assert listed, f"README.md's Layout has no entry for explorer/{package}/"
        absent = sorted(m for m in _modules(EXPLORER / package) if m not in listed.group(1))
        assert not absent, f"README.md's entry for explorer/{package}/ does not name {absent}"


@pytest.mark.parametrize("package", ["app", "ui", "finetune"])
def test_the_package_lists_its_modules(package):
    doc = (EXPLORER / package / "__init__.py").read_text().split('"""')[1]
    listed = set(re.findall(r"^ {4}(\w+\.py)\b", doc, re.M))
    present = _modules(EXPLORER / package) - {"__main__.py"}
    assert listed == present, (
        f"explorer/{package}/__init__'s list: missing {sorted(present - listed)}, gone {sorted(listed - present)}")
