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


def _entries(block: str) -> dict[str, str]:
    """The Layout block's entries: each line that names a path, with the lines indented under it."""
    entries, head = {}, None
    for line in block.splitlines():
        if line[:1].strip() and not line.startswith("#"):
            head = line.split()[0].rstrip(",")
            entries[head] = line
        elif head and line.startswith(" "):
            entries[head] += "\n" + line
    return entries


def test_the_readme_layout_names_every_module_and_nothing_that_is_gone():
    block = _layout_block()
    named = set(re.findall(r"explorer/([\w/]+\.py)", block))
    gone = sorted(n for n in named if not (EXPLORER / n).is_file())
    assert not gone, f"README.md's Layout names explorer/{gone}, which does not exist"
    entries = _entries(block)
    missing = []
    for path in sorted(EXPLORER.rglob("*.py")):
        module = path.relative_to(EXPLORER).as_posix()
        if path.name == "__init__.py" and path.parent != EXPLORER or module in named:
            continue
        # Else its folder's entries (explorer/ui/, or explorer/analysis/render.py's) name the file.
        folder = f"explorer/{path.parent.relative_to(EXPLORER).as_posix()}/".replace("explorer/./", "explorer/")
        if not any(head.startswith(folder) and re.search(rf"\b{re.escape(path.name)}\b", text)
                   for head, text in entries.items()):
            missing.append(module)
    assert not missing, f"README.md's Layout does not name explorer/{missing}"


@pytest.mark.parametrize("package", ["app", "ui", "finetune"])
def test_the_package_lists_its_modules(package):
    doc = (EXPLORER / package / "__init__.py").read_text().split('"""')[1]
    listed = set(re.findall(r"^ {4}(\w+\.py)\b", doc, re.M))
    present = _modules(EXPLORER / package) - {"__main__.py"}
    assert listed == present, (
        f"explorer/{package}/__init__'s list: missing {sorted(present - listed)}, gone {sorted(listed - present)}")
