"""tools/travel.py on a repository of its own: what a device call would send, and folders left out of the
index for the call and put back, with HEAD and the files on disk untouched."""

from __future__ import annotations

import subprocess

import pytest

from tools import travel


def _git(root, *args):
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "a.py").write_bytes(b"x" * 1000)
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "weights.h5").write_bytes(b"w" * 50_000)
    (tmp_path / ".gitignore").write_text("/runs/\n")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "data.npz").write_bytes(b"d" * 20_000)
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "first")
    (tmp_path / "notes.txt").write_bytes(b"n" * 300)  # untracked, not ignored: it travels too
    return tmp_path


def test_size_counts_tracked_untracked_and_carried_less_what_is_left_out(repo):
    gitignore = len((repo / ".gitignore").read_bytes())
    out = travel.size(repo, [], ["runs/data.npz"])
    assert (out["tracked"], out["untracked"], out["carried"]) == (51_000 + gitignore, 300, 20_000)
    assert travel.size(repo, ["big"], ["runs"])["total"] == 1000 + gitignore + 300 + 20_000


def test_leave_out_then_restore_gives_back_the_index_and_the_exclude_file(repo):
    exclude = repo / ".git" / "info" / "exclude"
    before = exclude.read_text()
    print(travel.leave_out(repo, ["big"]))
    assert (repo / "big" / "weights.h5").is_file()  # on disk, and in HEAD
    assert "big/weights.h5" not in _git(repo, "ls-files") and "big/weights.h5" in _git(repo, "ls-tree", "-r",
                                                                                        "HEAD", "--name-only")
    assert "big" not in _git(repo, "status", "--porcelain", "--untracked-files=all").replace("D  big", "")
    assert travel.size(repo, [], [])["tracked"] < 10_000  # what git tracks now is what travels
    with pytest.raises(SystemExit, match="already left out"):
        travel.leave_out(repo, ["code"])
    assert travel.restore(repo) == "restored: big"
    assert exclude.read_text() == before and _git(repo, "status", "--porcelain") == "?? notes.txt\n"
    assert travel.restore(repo) == "nothing was left out"
    with pytest.raises(SystemExit, match="nothing tracked under nowhere"):
        travel.leave_out(repo, ["nowhere"])
