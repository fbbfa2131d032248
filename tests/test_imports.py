"""Imports that tell the truth: an import inside a function defers something, or it belongs at the top.

Importing any module of the package runs explorer/__init__.py, which imports Keras (it registers the layers),
so Keras, numpy and the standard library are always there: importing them inside a function defers nothing.
What an import inside a function may defer is a module the file does not already pull in at its top: a heavy
or optional library (TensorFlow under JAX, JAX under TensorFlow, Gradio, matplotlib, the Hub client, Ray,
...), or a module of ours that pulls one in. Anything else goes at the top. An import that must stay inside
for another reason says why on its line (`# deferred: <why>`)."""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "explorer"
# What an import inside a function may defer: libraries that cost seconds to import or may be absent.
DEFERRABLE = {"tensorflow", "jax", "jaxlib", "gradio", "gradio_client", "matplotlib", "huggingface_hub", "ray",
              "skimage", "imagecorruptions", "h5py", "torch", "google", "scipy", "pandas", "tf_keras", "optree",
              "PIL", "threadpoolctl", "mcp", "pytest"}
PRAGMA = "# deferred:"


def _name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


MODULES = {_name(p): p for p in PACKAGE.rglob("*.py")}


def _targets(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement loads (`from explorer.ui import shell` loads explorer.ui.shell)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not node.module:
        return []
    subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES]
    return subs or [node.module]


@cache
def _top_level(module: str) -> frozenset[str]:
    """What `module` imports when it is imported: its statements outside functions (ifs and trys included)."""
    tree = ast.parse(MODULES[module].read_text())
    found: set[str] = set()

    def visit(nodes):
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update(_targets(node))
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(ast.iter_child_nodes(node))
            elif isinstance(node, ast.ClassDef):
                visit(node.body)
    visit(tree.body)
    return frozenset(found)


@cache
def _pulls(module: str, seen: frozenset[str] = frozenset()) -> frozenset[str]:
    """Every top-level package `module` brings in when imported (its parents' __init__ included)."""
    roots: set[str] = set()
    parts = module.split(".")
    chain = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for name in chain:
        if name not in MODULES or name in seen:
            continue
        for target in _top_level(name):
            root = target.split(".")[0]
            if root == "explorer":
                inner = target if target in MODULES else target.rsplit(".", 1)[0]
                if inner in MODULES and inner not in seen:
                    roots |= _pulls(inner, seen | {name})
            else:
                roots.add(root)
    return frozenset(roots)


def _stdlib(root: str) -> bool:
    return root in sys.stdlib_module_names or root == "__future__"


def _offences(module: str) -> list[str]:
    path = MODULES[module]
    lines = path.read_text().splitlines()
    has = _pulls(module)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for inner in ast.walk(node):
            if not isinstance(inner, (ast.Import, ast.ImportFrom)) or PRAGMA in lines[inner.lineno - 1]:
                continue
            for target in _targets(inner):
                root = target.split(".")[0]
                if root == "explorer":
                    module_of = target if target in MODULES else target.rsplit(".", 1)[0]
                    defers = (_pulls(module_of) & DEFERRABLE) - has if module_of in MODULES else set()
                else:
                    defers = {root} & DEFERRABLE - has
                if not defers:
                    why = "always loaded" if root in ("keras", "numpy") or _stdlib(root) else "already loaded"
                    found.append(f"line {inner.lineno} in {node.name}(): {target} ({why}: import it at the top)")
    return sorted(set(found))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_an_import_inside_a_function_defers_something(module):
    offences = _offences(module)
    assert not offences, f"{MODULES[module].relative_to(ROOT)}: {offences}"


def test_the_rule_sees_what_defers_nothing(tmp_path, monkeypatch):
    folder = tmp_path / "explorer"
    folder.mkdir()
    (folder / "__init__.py").write_text("import keras\n")
    (folder / "heavy.py").write_text("import matplotlib\n")
    (folder / "light.py").write_text("import json\n")
    (folder / "user.py").write_text(
        "import json\n\ndef f():\n    import json\n    import time\n    import numpy\n    import keras\n"
        "    from explorer import light\n    from explorer import heavy\n    import matplotlib\n"
        "    import os  # deferred: a test of the pragma\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "MODULES", {_name(p): p for p in folder.rglob("*.py")})
    _top_level.cache_clear()
    _pulls.cache_clear()
    try:
        said = " ".join(_offences("explorer.user"))
    finally:
        _top_level.cache_clear()
        _pulls.cache_clear()
    for flagged in ("json", "time", "numpy", "keras", "explorer.light"):
        assert f": {flagged} (" in said, flagged
    for kept in ("explorer.heavy", "matplotlib", ": os ("):
        assert kept not in said, kept
