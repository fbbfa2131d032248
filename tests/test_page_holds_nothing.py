"""The page only wires: no module under explorer/ui keeps what a second visitor's request depends on (a
registry or a lock, at module level or in a tab's object) or writes files; those are the app's services
(explorer/app, explorer/analysis/trust_service.py, explorer/core/atomic.py). And a run's status is one enum,
compared nowhere as a string."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UI = sorted((ROOT / "explorer" / "ui").glob("*.py"))
# Calls that write files or make folders, and the modules whose only use would be that or a lock.
WRITES = {"write_text", "write_bytes", "mkdir", "mkdtemp", "mkstemp", "savefig", "to_csv", "write_files", "save",
          "rmtree", "copyfile", "copytree", "move", "unlink", "rename", "replace_file"}
HOLDERS = {"threading", "tempfile", "shutil", "multiprocessing"}
EMPTY = {"dict", "list", "set", "OrderedDict", "defaultdict", "deque", "Lock", "RLock", "Event", "Condition"}
MUTATORS = {"append", "extend", "add", "update", "setdefault", "pop", "popitem", "clear", "insert", "remove",
            "discard", "__setitem__", "move_to_end"}
PAGE_MODULE_LINES = {"finetune.py": 220}


def _empty_holder(value: ast.expr) -> bool:
    """An empty dict, list or set (a literal or a call), or a lock: what a registry starts as."""
    if isinstance(value, (ast.Dict, ast.List, ast.Set)):
        return not (getattr(value, "keys", None) or getattr(value, "elts", None))
    if isinstance(value, ast.Call):
        name = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", "")
        return name in EMPTY
    return False


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    module_names = {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                    if isinstance(t, ast.Name)}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _empty_holder(node.value):
            found.append(f"line {node.lineno}: a module-level registry or lock")
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"line {node.lineno}: imports {n}" for n in names if n.split(".")[0] in HOLDERS]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in WRITES:
                found.append(f"line {node.lineno}: writes files ({name})")
            modes = [*node.args[1:], *(k.value for k in node.keywords if k.arg == "mode")]
            if name == "open" and any(isinstance(m, ast.Constant) and isinstance(m.value, str)
                                      and set(m.value) & set("wax+") for m in modes):
                found.append(f"line {node.lineno}: opens a file to write")
            if name in MUTATORS and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                    and func.value.id in module_names:
                found.append(f"line {node.lineno}: changes the module-level {func.value.id}")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" \
                        and node.value is not None and _empty_holder(node.value):
                    found.append(f"line {node.lineno}: self.{t.attr} is a registry or lock kept by a tab")
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in module_names:
                    found.append(f"line {node.lineno}: changes the module-level {t.value.id}")
    return found


@pytest.mark.parametrize("path", UI, ids=lambda p: p.name)
def test_a_page_module_keeps_no_registry_or_lock_and_writes_no_file(path):
    offences = _offences(path)
    assert not offences, (f"explorer/ui/{path.name} holds state or writes files ({'; '.join(offences)}): move it "
                          f"into a service below the page (explorer/app, or the analysis it belongs to)")


def test_the_rule_sees_a_registry_a_lock_and_a_write(tmp_path):
    page = tmp_path / "page.py"
    page.write_text("import threading\nSEEN = {}\nTABLE = {'a': 1}\n\nclass Tab:\n    def __init__(self):\n"
                    "        self._runs = dict()\n\n    def go(self, key, folder):\n        SEEN[key] = 1\n"
                    "        TABLE.update(b=2)\n        (folder / 'x').write_text('x')\n        open(folder, 'w')\n")
    said = " ".join(_offences(page))
    for what in ("imports threading", "module-level registry", "self._runs", "module-level SEEN",
                 "module-level TABLE", "writes files (write_text)", "opens a file to write"):
        assert what in said, what


@pytest.mark.parametrize("name, most", PAGE_MODULE_LINES.items())
def test_the_fine_tune_page_is_wiring_only(name, most):
    lines = len((ROOT / "explorer" / "ui" / name).read_text().splitlines())
    assert lines <= most, f"explorer/ui/{name} has {lines} lines (at most {most}): move what is not wiring down"


def test_a_runs_status_is_compared_only_as_the_enum():
    """RunStatus (explorer/finetune/state.py) names a run's states: nowhere else compares a status with a
    string literal."""
    words = "idle|starting|training|done|cancelled|failed"
    pattern = re.compile(rf"""status\s*(?:==|!=|\bin\b)\s*[\(\[]?\s*["']({words})""")
    found = [f"{p.relative_to(ROOT)}:{i}" for folder in ("explorer", "tests", "bench", "tools")
             for p in (ROOT / folder).rglob("*.py") if p.name != "state.py" and p != Path(__file__)
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, f"a run's status compared with a string (use RunStatus): {found}"
