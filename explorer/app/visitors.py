"""The pages open on a shared instance: whose each session is, what its slots show, the bases of the runs
going on or waiting, and what pruning the stored runs must therefore keep.

A page's session is named by the session id its server gives it (Gradio's `session_hash`, read in the page's
layer); its visitor is the random id their browser keeps (explorer.checkpoints.finetuned), told once the page
has opened.
Nothing here imports gradio: every id comes in as a plain string.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from pathlib import Path

from explorer.checkpoints.finetuned import RunStore, new_visitor_id, owner_key
from explorer.core import atomic

# The ids `new_visitor_id` makes, with room to spare; anything else a browser sends is replaced by a new one.
VISITOR_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")


def browser_secret(configured: str | None, root: str | os.PathLike) -> str:
    """The key the visitor's id is encrypted with in their browser: `configured` ($EXPLORER_BROWSER_SECRET),
    else one kept in `root` (beside the checkpoints), so ids (and with them visitors' runs) survive a restart."""
    if configured:
        return configured
    path = Path(root) / ".browser-secret"
    try:
        return path.read_text().strip()
    except OSError:
        secret = uuid.uuid4().hex
        try:
            atomic.write_text(path, secret)
        except OSError:
            pass
        return secret


class Visitors:
    """The sessions of a shared instance and what pruning `runs` must keep for them: a run shown in a page's
    slot, and the bases of a run going on or waiting, are never removed. Thread-safe: every handler of every
    page reads and writes it."""

    def __init__(self, runs: RunStore):
        self.runs = runs
        self._visitors: dict[str, str] = {}        # session -> the visitor id its browser keeps
        self._in_use: dict[str, dict] = {}         # session -> {slot: ref}: never pruned while shown
        self._bases: dict[int, set[str]] = {}      # a run going on or waiting -> its bases' refs
        self._lock = threading.Lock()

    def owner(self, session: str | None) -> str | None:
        """Whose runs a session may see: the hash of the id its browser keeps (shared mode; else None, everyone's).
        A session that never said its id (an API client that skipped /visitor) is a visitor of its own."""
        if not self.runs.shared:
            return None
        with self._lock:
            visitor = self._visitors.get(session) if session else None
        if visitor is None and session:
            visitor = f"session:{session}"
        return owner_key(visitor) if visitor else None

    def arrive(self, browser_id, session: str | None) -> str:
        """Ties `session` to the id its browser keeps (a new id when it has none, or one not of ours) and
        prunes the stored runs; returns the id, for the browser to keep."""
        visitor = browser_id if isinstance(browser_id, str) and VISITOR_ID.fullmatch(browser_id) \
            else new_visitor_id()
        if session:
            with self._lock:
                self._visitors[session] = visitor
        self.prune()
        return visitor

    def leave(self, session: str | None) -> None:
        """A page closed: its slots no longer keep runs from expiring."""
        with self._lock:
            self._in_use.pop(session, None)
            self._visitors.pop(session, None)

    def shown(self, session: str | None, slot: str, ref: str) -> None:
        """Remembers what a page's slot shows: a run shown is never pruned."""
        if session:
            with self._lock:
                self._in_use.setdefault(session, {})[slot] = ref

    def protect_bases(self, key: int, refs: set[str] | None) -> None:
        """Keeps a waiting or running job's bases from being pruned (None: the job ended)."""
        with self._lock:
            if refs is None:
                self._bases.pop(key, None)
            else:
                self._bases[key] = refs

    def shown_refs(self) -> set[str]:
        """Every reference a page's slot shows now."""
        with self._lock:
            return {ref for slots in self._in_use.values() for ref in slots.values() if ref}

    def prune(self, keep: set[str] = frozenset()) -> list[str]:
        """Removes expired and over-cap runs (shared mode), never one shown in a page, the base of a run
        going on or waiting, or one in `keep`; returns the removed references."""
        with self._lock:
            bases = {ref for refs in self._bases.values() for ref in refs}
        return self.runs.prune(self.shown_refs() | bases | set(keep))

    def published(self, folders: list, run_id: str, owner: str | None) -> None:
        """A run's checkpoints were moved into place: tagged with the run (what pruning goes by), then the
        stored runs pruned, these kept."""
        self.runs.mark_run(folders, run_id, owner)
        self.prune(keep={str(Path(f).relative_to(self.runs.root)) for f in folders})
