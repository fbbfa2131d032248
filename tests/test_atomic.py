"""explorer.core.atomic: a file or folder is written whole or not at all, and what a dead writer left is cleaned."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from explorer.core import atomic


def test_a_file_is_replaced_whole_and_a_failed_write_changes_nothing(tmp_path):
    path = tmp_path / "state.json"
    atomic.write_text(path, "first")
    atomic.write_text(path, "second")
    assert path.read_text() == "second"
    with pytest.raises(RuntimeError), atomic.replacing(path) as tmp:
        tmp.write_text("half of a third")
        raise RuntimeError("killed midway")
    assert path.read_text() == "second" and os.listdir(tmp_path) == ["state.json"]


def test_a_folder_is_renamed_into_place_and_never_replaces_another(tmp_path):
    target = tmp_path / "checkpoint"
    with atomic.replacing(target) as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text("{}")
    assert (target / "config.json").read_text() == "{}"
    (target / "weights").write_text("w")
    with pytest.raises(OSError), atomic.replacing(target) as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text("other")
    assert (target / "config.json").read_text() == "{}" and sorted(os.listdir(tmp_path)) == ["checkpoint"]


def test_temporary_names_are_hidden_unique_and_keep_the_name_s_end(tmp_path):
    names = {atomic.tmp_name(tmp_path / "epoch-0001.weights.h5").name for _ in range(50)}
    assert len(names) == 50
    assert all(n.startswith(f".tmp-{os.getpid()}-") and n.endswith("epoch-0001.weights.h5") for n in names)


def test_clean_stale_removes_only_what_dead_writers_left(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    (tmp_path / f".tmp-{pid}-abcd1234-run").mkdir()
    (tmp_path / f".tmp-{pid}-abcd1234-card.json").write_text("x")
    mine = atomic.tmp_name(tmp_path / "mine")
    mine.mkdir()
    (tmp_path / ".tmp-not-a-pid").mkdir()  # not ours to judge: left alone
    (tmp_path / "run").mkdir()
    removed = atomic.clean_stale(tmp_path)
    assert sorted(p.name for p in removed) == [f".tmp-{pid}-abcd1234-card.json", f".tmp-{pid}-abcd1234-run"]
    assert sorted(os.listdir(tmp_path)) == sorted([mine.name, ".tmp-not-a-pid", "run"])
