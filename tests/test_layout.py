"""The package's shape: its imports form no cycle, only explorer/ui touches gradio, and the layers of
STYLE.md point one way (a module never imports one above it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "explorer"
# Lower layers first: a module may import only modules of its own layer or below.
LAYERS = [
    {"config", "schedules", "inputs", "render", "plots", "render_evidence", "linear", "hub", "ablation", "compiled",
     "study_report", "settings", "card", "formatting", "fit_state", "devices", "predict"},
    {"layers", "data", "packed"},
    {"models", "augment", "batches", "step_augment", "folders", "checkpoints", "visitors", "catalog", "recipe"},
    {"device_batches"},
    {"probe", "fitting", "backup", "convert"},
    {"finetune", "evaluate", "evidence"},
    {"train", "window", "robustness", "workbench", "reports", "samples", "study", "mechanisms"},
    {"jobs"},
    {"runner", "worker"},
    {"ui"},
]


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Each module's name under `explorer.` (a package's modules as ui.shell, ...) and its file."""
    found = {".".join(p.relative_to(package).with_suffix("").parts).removesuffix(".__init__"): p
             for p in package.rglob("*.py") if p.name != "__main__.py"}
    found.pop("__init__", None)  # the package itself: it registers the layers, and imports nothing above
    return found


def imports(path: Path, known) -> set[str]:
    """The explorer modules a file imports, at module level or inside functions (`from explorer.ui import
    shell` imports explorer.ui.shell)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            subs = {f"{node.module}.{a.name}" for a in node.names}
            inside = {m for m in subs if m.removeprefix("explorer.") in known}
            found |= inside | ({node.module} if len(inside) < len(subs) else set())
    return {m for name in found if name.startswith("explorer.") and (m := name.removeprefix("explorer.")) in known}


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    known = modules(package)
    return {name: imports(path, known) - {name} for name, path in known.items()}


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order), or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def layer(name: str) -> int:
    top = name.split(".")[0]
    for i, members in enumerate(LAYERS):
        if top in members:
            return i
    raise AssertionError(f"explorer.{name} is in no layer of tests/test_layout.py: place it")


def test_the_imports_form_no_cycle():
    assert cycle(graph()) is None, cycle(graph())


def test_the_cycle_finder_finds_one(tmp_path):
    (tmp_path / "a.py").write_text("from explorer.b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    import explorer.c\n")
    (tmp_path / "c.py").write_text("from explorer import a\n")
    assert cycle(graph(tmp_path)) == ["a", "b", "c", "a"]
    (tmp_path / "c.py").write_text("import numpy\n")
    assert cycle(graph(tmp_path)) is None


def test_every_module_imports_only_its_layer_or_below():
    upward = [(name, other) for name, uses in graph().items() for other in uses
              if not name.startswith("ui") and layer(other) > layer(name)]
    assert upward == []


@pytest.mark.parametrize("name", sorted(n for n in modules() if not n.startswith("ui")))
def test_only_the_ui_imports_gradio(name):
    tree = ast.parse(modules()[name].read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in names if m.split(".")[0] in ("gradio", "gradio_client")}
