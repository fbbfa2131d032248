"""`python tools/travel.py`: what a call of the device tool sends to a lent GPU machine, kept under its limit.

A call sends the checkout's tracked files, its untracked files that git does not ignore, and the ignored paths
it carries, at most LIMIT_BYTES (64 MiB) in all. The project's tracked tree is larger than that (the study's
checkpoints, the figures of docs/), so a GPU call leaves such folders out of the index for its duration:

    python tools/travel.py size --leave-out checkpoints study ablation docs \
        --carry .whl runs/cifar10-q90-train.npz
    python tools/travel.py leave-out checkpoints study ablation docs    # before the call
    python tools/travel.py restore                                      # right after it: the index as it was

`leave-out` untracks the folders in the index only (`git rm -r --cached`: the files stay on disk, HEAD is
untouched) and ignores them in .git/info/exclude between two marker lines; `restore` puts the index back
from HEAD for those folders and removes the marked lines. Nothing is committed by either.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

LIMIT_BYTES = 64 * 2 ** 20
BEGIN, END = "# travel.py: left out for a device call (python tools/travel.py restore)", "# travel.py: end"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def _files(root: Path, *args: str) -> list[str]:
    return [f for f in _git(root, "ls-files", "-z", *args).split("\0") if f]


def _under(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _bytes(root: Path, paths) -> int:
    return sum((root / p).stat().st_size for p in paths if (root / p).is_file())


def size(root: Path, leave_out: list[str], carry: list[str]) -> dict:
    """Bytes that would travel: tracked (less `leave_out`), untracked and not ignored, carried."""
    tracked = [f for f in _files(root) if not _under(f, leave_out)]
    untracked = [f for f in _files(root, "--others", "--exclude-standard") if not _under(f, leave_out)]
    carried = []
    for c in carry:
        p = root / c
        carried += [str(q.relative_to(root)) for q in p.rglob("*") if q.is_file()] if p.is_dir() else [c]
    parts = {"tracked": _bytes(root, tracked), "untracked": _bytes(root, untracked), "carried": _bytes(root, carried)}
    return {**parts, "total": sum(parts.values()), "limit": LIMIT_BYTES}


def _exclude(root: Path) -> Path:
    path = Path(_git(root, "rev-parse", "--git-path", "info/exclude").strip())
    return path if path.is_absolute() else root / path


def _marked(lines: list[str]) -> tuple[list[str], list[str]]:
    """(the lines outside the markers, the folders between them)."""
    if BEGIN not in lines:
        return lines, []
    i = lines.index(BEGIN)
    j = lines.index(END, i) if END in lines[i:] else len(lines)
    return lines[:i] + lines[j + 1:], [line.strip("/") for line in lines[i + 1:j]]


def leave_out(root: Path, folders: list[str]) -> str:
    exclude = _exclude(root)
    lines = exclude.read_text().splitlines() if exclude.is_file() else []
    kept, already = _marked(lines)
    if already:
        raise SystemExit(f"error: {', '.join(already)} already left out: python tools/travel.py restore first")
    missing = [f for f in folders if not _files(root, "--", f)]
    if missing:
        raise SystemExit(f"error: nothing tracked under {', '.join(missing)}")
    _git(root, "rm", "-r", "-q", "--cached", "--", *folders)
    exclude.parent.mkdir(parents=True, exist_ok=True)
    exclude.write_text("\n".join(kept + [BEGIN] + [f"/{f.strip('/')}/" for f in folders] + [END]) + "\n")
    return f"left out of the index until `python tools/travel.py restore`: {', '.join(folders)}"


def restore(root: Path) -> str:
    exclude = _exclude(root)
    lines = exclude.read_text().splitlines() if exclude.is_file() else []
    kept, folders = _marked(lines)
    if folders:
        _git(root, "reset", "-q", "HEAD", "--", *folders)
    exclude.write_text("\n".join(kept) + ("\n" if kept else ""))
    return f"restored: {', '.join(folders)}" if folders else "nothing was left out"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python tools/travel.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("size", help="what a device call would send, against its limit")
    s.add_argument("--leave-out", nargs="*", default=[])
    s.add_argument("--carry", nargs="*", default=[])
    lo = sub.add_parser("leave-out", help="untrack folders in the index (not in HEAD) and ignore them")
    lo.add_argument("folders", nargs="+")
    sub.add_parser("restore", help="the index and .git/info/exclude as before leave-out")
    args = p.parse_args(argv)
    root = Path(_git(Path.cwd(), "rev-parse", "--show-toplevel").strip())
    if args.command == "size":
        out = size(root, args.leave_out, args.carry)
        mib = {k: v / 2 ** 20 for k, v in out.items()}
        fits = out["total"] <= LIMIT_BYTES
        print(f"tracked {mib['tracked']:.1f} MiB + untracked {mib['untracked']:.1f} + carried {mib['carried']:.1f} "
              f"= {mib['total']:.1f} MiB of {mib['limit']:.0f}: {'fits' if fits else 'TOO LARGE'}")
        return 0 if fits else 1
    print(leave_out(root, args.folders) if args.command == "leave-out" else restore(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
