"""Files and folders written whole or not at all: written under a temporary name beside their place, flushed
to disk, then renamed into place, so that a reader (another visitor, a resumed run, the next session) never
sees half of one, and a writer killed midway leaves only a temporary name behind.

Temporary names are `.tmp-<pid>-<random>-<name>`: hidden, never listed as a checkpoint, a backup or a run,
and removable by `clean_stale` once the writer that made them is gone."""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

TMP_PREFIX = ".tmp-"


def tmp_name(path: str | os.PathLike) -> Path:
    """A temporary sibling of `path`, unique to this writer: `.tmp-<pid>-<random>-<name>`."""
    path = Path(path)
    return path.with_name(f"{TMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}-{path.name}")


def fsync(path: str | os.PathLike) -> None:
    """Flushes a file, or every file of a folder, to disk."""
    path = Path(path)
    for file in (p for p in path.rglob("*") if p.is_file()) if path.is_dir() else (path,):
        with open(file, "rb") as f:
            os.fsync(f.fileno())


@contextmanager
def replacing(path: str | os.PathLike, durable: bool = True) -> Iterator[Path]:
    """Yields a temporary path to write `path`'s new content to (a file, or a folder the block creates);
    when the block ends without an error it is flushed to disk (unless not `durable`) and renamed to `path`,
    replacing a file there (a folder never replaces another: OSError). On any error nothing changes at
    `path` and the temporary file or folder is removed."""
    path = Path(path)
    tmp = tmp_name(path)
    try:
        yield tmp
        if durable:
            fsync(tmp)
        if tmp.is_dir():
            os.rename(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def write_bytes(path: str | os.PathLike, data: bytes, durable: bool = True) -> None:
    """Replaces the file at `path` with `data`, whole or not at all."""
    with replacing(path, durable) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike, text: str, durable: bool = True) -> None:
    """Replaces the file at `path` with `text` (UTF-8), whole or not at all."""
    write_bytes(path, text.encode("utf-8"), durable)


class WrittenOnce:
    """Files written once per key, each whole or not at all (write_bytes, not made durable: a cache), the last
    `capacity` keys remembered: `path(key, encode, place)` is the file written for `key` while it exists, else
    `encode()`'s bytes written at `place(bytes)` (skipped when a file of that size is there already)."""

    def __init__(self, capacity: int = 1024):
        self.capacity = capacity
        self._written: OrderedDict[object, str] = OrderedDict()
        self._lock = threading.Lock()

    def path(self, key, encode: Callable[[], bytes], place: Callable[[bytes], Path]) -> str:
        with self._lock:
            path = self._written.get(key)
            if path is not None:
                self._written.move_to_end(key)
        if path is not None and os.path.exists(path):
            return path
        data = encode()
        target = Path(place(data)).resolve()
        target.parent.mkdir(parents=True, exist_ok=True)
        if not (target.exists() and target.stat().st_size == len(data)):
            write_bytes(target, data, durable=False)
        with self._lock:
            self._written[key] = str(target)
            while len(self._written) > self.capacity:
                self._written.popitem(last=False)
        return str(target)


def _dead_writer(tmp: Path) -> bool:
    """Whether `tmp` is a temporary name whose writer (the pid in its name) is gone."""
    pid = tmp.name[len(TMP_PREFIX):].split("-", 1)[0]
    if not tmp.name.startswith(TMP_PREFIX) or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def clean_stale(parent: str | os.PathLike) -> list[Path]:
    """Removes the temporary files and folders in `parent` left by writers that died; returns them."""
    parent, removed = Path(parent), []
    if not parent.is_dir():
        return removed
    for path in parent.glob(f"{TMP_PREFIX}*"):
        if _dead_writer(path):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed
