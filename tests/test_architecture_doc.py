"""docs/architecture.md's table of layers says what tests/test_layout.py's LAYERS says: every module of the
package sits in the same layer by both, and every name LAYERS lists is named in the table's row of its layer.
LAYERS is the authority (a test enforces it); the table is written for people, and this keeps it true."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.test_layout import LAYERS, layer, modules

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
HEADER = re.compile(r"^\|\s*Layer\s*\|.*\|\s*Modules\b[^|]*\|\s*$")
# In a row's Modules cell: a backticked name with the parenthesis after it, if any; or a parenthesis alone,
# whose backticked words (an aside) name nothing.
TOKEN = re.compile(r"`(?P<name>[^`]+)`(?:\s*\((?P<note>[^()]*)\))?|\((?P<aside>[^()]*)\)")
HOW_TO_FIX = ("LAYERS in tests/test_layout.py is the authority: make the table in docs/architecture.md (section "
              "'The layers', the '| Layer | What it holds | Modules |' table) say the same, a module in the row of "
              "its layer (`pkg.module`; `pkg.*` for every module of a layer package; `pkg` (package) for a package "
              "that is one entry); if the layer itself is what changed, change LAYERS and the table together")


@dataclass
class Table:
    """What the table names: `modules[name]` is the row of a module (or of a package's `__init__`) it names
    alone; `packages[pkg]` the row of a package named whole (`pkg.*`, `pkg` (package), or a layer package's
    bare name, which places its `__init__` and every module of it not named alone, as LAYERS does)."""

    rows: int = 0
    modules: dict[str, int] = field(default_factory=dict)
    packages: dict[str, int] = field(default_factory=dict)
    members: list[tuple[str, int]] = field(default_factory=list)  # `pkg` (package: `a`, ...): (pkg.a, row)
    twice: list[str] = field(default_factory=list)

    def name(self, key: str, row: int, into: dict) -> None:
        if key in into and into[key] != row:
            self.twice.append(f"{key} (layers {into[key]} and {row})")
        into[key] = row

    def layer(self, module: str) -> int | None:
        """The row the table puts `module` in, found as LAYERS finds it: the module itself, else its package."""
        if module in self.modules:
            return self.modules[module]
        package = module.split(".")[0]
        return self.packages.get(package, self.modules.get(package) if "." in module else None)


def read_table(text: str) -> Table:
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if HEADER.match(line.strip())]
    assert len(starts) == 1, f"docs/architecture.md should hold one '| Layer | ... | Modules |' table: {len(starts)}"
    table = Table()
    for line in lines[starts[0] + 2:]:
        if not line.strip().startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert cells[0].isdigit() and int(cells[0]) == table.rows, (
            f"the table's rows should be layers 0, 1, 2, ... in order; row {table.rows + 1} says {cells[0]!r}")
        read_cell(cells[-1], table.rows, table)
        table.rows += 1
    return table


def read_cell(cell: str, row: int, table: Table) -> None:
    for token in TOKEN.finditer(cell):
        if token["name"] is None:
            continue  # an aside in parentheses
        name = token["name"].strip().removeprefix("explorer.")
        note = (token["note"] or "").strip()
        if name.endswith(".*"):
            table.name(name[:-2], row, table.packages)
        elif note.startswith("package"):
            table.name(name, row, table.packages)
            members = note.removeprefix("package").lstrip(":").strip()
            table.members += [(f"{name}.{m}", row) for m in re.findall(r"`([^`]+)`", members)]
        else:
            table.name(name, row, table.modules)


def layers_layer(module: str) -> int | None:
    try:
        return layer(module)
    except AssertionError:  # in no layer: tests/test_layout.py says so
        return None


def where(row: int | None) -> str:
    return "no row" if row is None else f"layer {row}"


@pytest.fixture(scope="module")
def table() -> Table:
    return read_table(DOC.read_text())


def test_the_table_has_a_row_per_layer_and_names_each_thing_once(table):
    assert table.rows == len(LAYERS), f"the table has {table.rows} rows, LAYERS {len(LAYERS)} layers. {HOW_TO_FIX}"
    assert table.twice == [], f"the table names these in two rows: {', '.join(table.twice)}. {HOW_TO_FIX}"


def misplaced(table: Table) -> list[str]:
    """Each module of explorer/ that the table and LAYERS put in different layers, said so."""
    return [f"explorer.{m}: the table puts it in {where(table.layer(m))}, LAYERS in {where(layers_layer(m))}"
            for m in sorted(modules()) if table.layer(m) != layers_layer(m)]


def unnamed(table: Table) -> list[str]:
    """Each name LAYERS lists that the table names in no row (alone, or by a whole package's entry)."""
    return [f"{name} (LAYERS: layer {i})" for i, members in enumerate(LAYERS) for name in sorted(members)
            if name not in table.modules and name not in table.packages
            and name.split(".")[0] not in table.packages]


def test_every_module_sits_in_the_same_layer_in_the_table_and_in_layers(table):
    assert misplaced(table) == [], "\n".join(misplaced(table)) + f"\n{HOW_TO_FIX}"


def test_the_table_names_every_name_layers_lists(table):
    assert unnamed(table) == [], f"the table names no row for {', '.join(unnamed(table))}. {HOW_TO_FIX}"


def test_the_table_names_only_modules_that_exist(table):
    present = set(modules())
    stale = [name for name in sorted({*table.modules, *table.packages}) if name not in present]
    assert stale == [], f"the table names {', '.join(stale)}, which explorer/ does not hold. {HOW_TO_FIX}"
    wrong = [f"{m} (listed in layer {row}'s package, LAYERS: {where(layers_layer(m))})"
             for m, row in table.members if m not in present or layers_layer(m) != row]
    assert wrong == [], f"a package's modules listed in the table: {', '.join(wrong)}. {HOW_TO_FIX}"


def test_a_module_moved_to_another_row_or_dropped_is_named():
    text = DOC.read_text()
    assert "`training.recipe`, " in text and "| `training.runs` |" in text
    moved = text.replace("`training.recipe`, ", "", 1).replace("| `training.runs` |",
                                                                "| `training.runs`, `training.recipe` |", 1)
    assert misplaced(read_table(moved)) == [
        "explorer.training.recipe: the table puts it in layer 6, LAYERS in layer 2"]
    dropped = read_table(text.replace("`model.config`, ", "", 1))
    assert misplaced(dropped) == [] and unnamed(dropped) == ["model.config (LAYERS: layer 0)"]


def test_the_reader_knows_each_form_of_a_name():
    table = Table()
    read_cell("`core.*`, `model.config` (the ViT's sizes), `app` (package: `state`, `workbench`), `ui` (package), "
              "`train` and the rest (each a few lines: `evaluate.main`)", 3, table)
    assert table.packages == {"core": 3, "app": 3, "ui": 3}
    assert table.modules == {"model.config": 3, "train": 3}
    assert table.members == [("app.state", 3), ("app.workbench", 3)]
    assert table.layer("app.starts") == table.layer("core") == 3 and table.layer("data.folders") is None
