"""The package's shape: its imports form no cycle; they point one way, from the UI down through the app's
work to the model (a module never imports one of a layer above its own); only explorer/ui touches gradio;
the files of explorer/finetune keep to the process they run in; and its modules, classes and functions stay
small enough to read at once."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "explorer"
# Lower layers first: a module may import only modules of its own layer or below. A package named alone is
# one entry (every module of it sits there: finetune, app, ui, convert); the layer packages (core, model, data,
# checkpoints, training, analysis, study) name each module, their __init__ (a docstring) sits at the bottom.
LAYERS = [
    {"core", "model", "data", "checkpoints", "training", "analysis", "study",
     "analysis.plots", "analysis.render", "analysis.render_evidence", "analysis.render_trust", "checkpoints.hub",
     "checkpoints.model_card",
     "core.atomic", "core.card", "core.devices", "core.formatting", "core.protocol", "core.settings",
     "data.inputs", "model.ablation", "model.compiled", "model.config", "model.predict", "study.report",
     "training.fit_state", "training.linear_probe", "training.schedules"},
    {"data.datasets", "data.packed", "model.layers"},
    {"app.visitors", "checkpoints.catalog", "checkpoints.held_out", "checkpoints.store", "checkpoints.finetuned",
     "data.augment", "data.batches", "data.folders", "data.step_augment", "model.models", "training.recipe"},
    {"data.device_batches"},
    {"convert", "model.probe", "training.backup", "training.fitting"},
    {"analysis.evaluate", "analysis.evidence", "training.head", "training.tuning"},
    {"training.runs"},
    {"analysis.corruptions", "analysis.faithfulness", "analysis.lsa_switches", "analysis.reports",
     "analysis.robustness", "analysis.trust",
     "analysis.trust_service", "data.samples", "evaluate", "layers", "packed", "settings", "study.grid",
     "study.mechanisms", "train"},
    {"finetune"},
    {"app"},
    {"ui"},
]

# The files of explorer/finetune by the process that runs them (its __init__ lists them so): what the worker
# runs and what the app runs import nothing of each other (the app starts the worker by its module's name),
# and what both read imports neither. What the two processes send each other is explorer.core.protocol, and what
# a job trains is explorer.training.runs: both below the package.
PROCESSES = {
    "both": {"plan", "jobfolder", "backend"},
    "worker": {"serve", "job", "warm", "compiling"},
    "app": {"runner", "queue", "state", "supervisor", "handle", "follow", "report", "estimate"},
}
MAY_IMPORT = {"both": {"both"}, "worker": {"worker", "both"}, "app": {"app", "both"}}

# The most lines a module, a class and a function (or method) of explorer/finetune may have.
LIMITS = {"module": 450, "class": 250, "function": 60}


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
    for key in (name, name.split(".")[0]):  # the module itself, else its package
        for i, members in enumerate(LAYERS):
            if key in members:
                return i
    raise AssertionError(f"explorer.{name} is in no layer of tests/test_layout.py: place it")


def oversized(path: Path, limits: dict = LIMITS) -> list[str]:
    """What in the file at `path` is longer than `limits` allow: the module, its classes, its functions."""
    text = path.read_text()
    found = [f"{path.name}: {len(text.splitlines())} lines"] if len(text.splitlines()) > limits["module"] else []
    for node in ast.walk(ast.parse(text)):
        kind = ("class" if isinstance(node, ast.ClassDef) else
                "function" if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None)
        if kind and node.end_lineno - node.lineno + 1 > limits[kind]:
            found.append(f"{path.name}: {kind} {node.name}, {node.end_lineno - node.lineno + 1} lines")
    return found


def test_the_imports_form_no_cycle():
    assert cycle(graph()) is None, cycle(graph())


def test_the_cycle_finder_finds_one(tmp_path):
    (tmp_path / "a.py").write_text("from explorer.b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    import explorer.c\n")
    (tmp_path / "c.py").write_text("from explorer import a\n")
    assert cycle(graph(tmp_path)) == ["a", "b", "c", "a"]
    (tmp_path / "c.py").write_text("import numpy\n")
    assert cycle(graph(tmp_path)) is None


def packages(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The (package, package) pairs one imports the other by: a module's package is its first part under
    explorer (finetune, ui, convert), the top-level modules' is explorer itself."""
    subpackages = {name.split(".")[0] for name in edges if "." in name}

    def package(name: str) -> str:
        return name.split(".")[0] if name.split(".")[0] in subpackages else "explorer"
    return {(package(a), package(b)) for a, uses in edges.items() for b in uses if package(a) != package(b)}


def test_no_two_packages_import_each_other():
    pairs = packages(graph())
    assert sorted((a, b) for a, b in pairs if (b, a) in pairs) == []


def test_the_package_check_finds_two_that_import_each_other():
    assert packages({"train": {"finetune.head"}, "finetune.job": {"train"}, "finetune.head": set()}) == {
        ("explorer", "finetune"), ("finetune", "explorer")}


def test_every_module_named_in_a_layer_exists():
    named = {m for members in LAYERS for m in members}
    assert sorted(m for m in named if not any(n == m or n.startswith(f"{m}.") for n in modules())) == []


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


def test_each_finetune_file_keeps_to_its_process():
    package = {n.removeprefix("finetune."): n for n in modules() if n.startswith("finetune.")}
    group = {name: g for g, names in PROCESSES.items() for name in names}
    assert sorted(set(package) - set(group)) == [], "place it in PROCESSES (and the list in its __init__)"
    assert sorted(set(group) - set(package)) == [], "PROCESSES names a module that is gone"
    edges = graph()
    crossing = [(name, other) for name, full in package.items() for other in edges[full]
                if other.startswith("finetune.")
                and group[other.removeprefix("finetune.")] not in MAY_IMPORT[group[name]]]
    assert crossing == []


def test_the_finetune_package_is_made_of_small_parts():
    assert [f for path in sorted((PACKAGE / "finetune").glob("*.py")) for f in oversized(path)] == []


def test_the_size_check_finds_what_is_too_long(tmp_path):
    body = "".join(f"        x{i} = {i}\n" for i in range(5))
    (tmp_path / "m.py").write_text(f"class C:\n    def f(self):\n{body}\n\ndef g():\n    pass\n")
    assert oversized(tmp_path / "m.py", {"module": 10, "class": 6, "function": 5}) == [
        "m.py: 11 lines", "m.py: class C, 7 lines", "m.py: function f, 6 lines"]
    assert oversized(tmp_path / "m.py", {"module": 11, "class": 7, "function": 6}) == []
