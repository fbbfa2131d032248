"""The fine-tuned runs' checkpoints on disk (RunStore), and on a public Space shared by strangers whose each one
is, what a visitor may reach, and what is kept of their runs.

Shared mode is on where the app runs as a Hugging Face Space (`SPACE_ID` is set there) or with
`EXPLORER_SHARED=1`; off it, the app is the single-user tool (every checkpoint listed, paths accepted,
nothing removed). In shared mode:

- a visitor is a random id kept in their browser (`gr.BrowserState`); on disk only a hash of it names
  the folder of their runs, `finetuned/<owner>/`;
- a model slot takes the names the app lists to that visitor (the shipped checkpoints and their own runs)
  and Hub ids, nothing else, and a refusal never shows a server path;
- stored runs are capped in count and bytes and expire (`prune`), oldest first, never one in use.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
import shutil
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from explorer.checkpoints.hub import looks_like_repo_id
from explorer.checkpoints.store import CheckpointError, list_checkpoints, read_card, update_card
from explorer.core import atomic
from explorer.core.card import Run
from explorer.core.settings import Settings

FINETUNED = "finetuned"
# One message for every reference a visitor may not use: it says what is allowed and reveals nothing.
REFUSED = ("not a model this app offers you: choose a checkpoint from the list, or type a Hub id "
           "(owner/name or owner/name@revision)")


def shared_mode(settings: Settings) -> bool:
    """On with EXPLORER_SHARED=1 or where SPACE_ID is set (a Space), unless EXPLORER_SHARED=0."""
    if settings.shared is not None:
        return settings.shared
    return bool(settings.space_id)


@dataclass(frozen=True)
class SharedLimits:
    """What a shared instance allows; every field comes from an EXPLORER_* variable (explorer.settings)."""

    max_queue: int = Settings.max_queue            # EXPLORER_MAX_QUEUE: Starts waiting behind the run going on
    max_runs: int = Settings.max_runs              # EXPLORER_MAX_RUNS: fine-tuning runs kept, all visitors together
    max_run_mb: float = Settings.max_run_mb        # EXPLORER_MAX_RUN_MB: their checkpoints' size, all together
    run_ttl_hours: float = Settings.run_ttl_hours  # EXPLORER_RUN_TTL_HOURS: a run is removed this long after it ended
    max_hub_mb: float = Settings.max_hub_mb        # EXPLORER_MAX_HUB_MB: a Hub checkpoint's files, checked first
    max_hub_cache_mb: float = Settings.max_hub_cache_mb  # EXPLORER_MAX_HUB_CACHE_MB: the app's Hub cache

    @classmethod
    def from_settings(cls, settings: Settings) -> SharedLimits:
        return cls(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(cls)})

    def describe(self) -> str:
        return (f"one run at a time, first come first served, with up to {self.max_queue} Starts waiting; "
                f"your runs are listed only in your browser and kept {self.run_ttl_hours:g} hours; at most "
                f"{self.max_runs} runs ({self.max_run_mb:g} MB) are kept for all visitors together, the oldest "
                f"removed first (never one that is loaded in a page); Hub checkpoints up to "
                f"{self.max_hub_mb:g} MB")


def new_visitor_id() -> str:
    return secrets.token_urlsafe(18)


def owner_key(visitor: str) -> str:
    """The folder name of a visitor's runs: a hash, so the disk never holds the id itself."""
    return hashlib.sha256(f"explorer-visitor:{visitor}".encode()).hexdigest()[:20]


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


class RunStore:
    """The checkpoints under `root` as each visitor may see them, and the fine-tuned runs kept there.

    With `shared` off, every checkpoint under root is everyone's and any folder or path is accepted, as
    the single-user tool always did; `owner` is then ignored.
    """

    def __init__(self, root: str | os.PathLike, shared: bool, limits: SharedLimits | None = None):
        self.root = Path(root)
        self.shared = shared
        self.limits = limits or SharedLimits()

    def out_dir(self, owner: str | None) -> Path:
        """Where a run's checkpoints go: `finetuned/`, or in shared mode `finetuned/<owner>/`."""
        base = self.root / FINETUNED
        return base / owner if self.shared and owner else base

    def listing(self, owner: str | None) -> list[str]:
        """The references a visitor's slots offer: every checkpoint (single user), or the shipped ones
        and the visitor's own runs (shared)."""
        refs = [str(p.relative_to(self.root)) for p in list_checkpoints(self.root)]
        if not self.shared:
            return refs
        mine = f"{FINETUNED}/{owner}/" if owner else None
        return [r for r in refs if not r.startswith(f"{FINETUNED}/") or (mine and r.startswith(mine))]

    def check(self, ref: str, owner: str | None) -> str:
        """`ref` when the visitor may load it, else CheckpointError(REFUSED) (shared mode); unchanged when
        not shared. A Hub id is allowed; a local name only when it is in the visitor's listing and stays
        inside root once symlinks are followed."""
        if not self.shared:
            return ref
        text = (ref or "").strip()
        if not text:
            raise CheckpointError("no model chosen: pick a checkpoint or type a Hub id owner/name[@revision]")
        if text in self.listing(owner):
            inside = (self.root / text).resolve()
            if inside.is_relative_to(self.root.resolve()):
                return text
        elif looks_like_repo_id(text) and not (self.root / text).exists() and "\\" not in text:
            return text
        raise CheckpointError(REFUSED)

    def is_hub(self, ref: str) -> bool:
        return not (self.root / ref).exists() and looks_like_repo_id(ref)

    # --- what is kept -----------------------------------------------------------------------------

    def runs(self) -> list[dict]:
        """Stored fine-tuning runs, oldest first: {"id", "owner", "ended", "folders", "bytes"}."""
        groups: dict[str, dict] = {}
        for folder in list_checkpoints(self.root / FINETUNED):
            try:
                card = read_card(folder)
            except CheckpointError:
                continue
            run = card.run or Run()
            key = run.id or str(folder)
            group = groups.setdefault(key, {"id": key, "owner": run.owner, "folders": [], "bytes": 0,
                                            "ended": run.ended or folder.stat().st_mtime})
            group["folders"].append(folder)
            group["bytes"] += _size(folder)
        return sorted(groups.values(), key=lambda g: g["ended"])

    def mark_run(self, folders: list[str | os.PathLike], run_id: str, owner: str | None) -> None:
        """Tags a finished run's checkpoints with its id, owner and end time (what `prune` goes by)."""
        ended = time.time()
        for folder in folders:
            update_card(folder, run={"id": run_id, "owner": owner, "ended": ended})

    def prune(self, protect: set[str] = frozenset(), now: float | None = None) -> list[str]:
        """Removes whole runs, oldest first, while there are more than `max_runs`, they take more than
        `max_run_mb`, or they ended over `run_ttl_hours` ago; never a run with a checkpoint in `protect`
        (references relative to root: loaded in a page, or the base of a run going on or waiting). Only
        in shared mode; the shipped checkpoints are never touched. Returns the removed references."""
        if not self.shared:
            return []
        now = time.time() if now is None else now
        runs = self.runs()
        count, total = len(runs), sum(r["bytes"] for r in runs)
        limit_bytes = self.limits.max_run_mb * 1e6
        removed = []
        for run in runs:
            refs = [str(Path(f).relative_to(self.root)) for f in run["folders"]]
            expired = now - run["ended"] > self.limits.run_ttl_hours * 3600
            if not (expired or count > self.limits.max_runs or total > limit_bytes):
                continue
            if any(r in protect for r in refs):
                continue
            for folder in run["folders"]:
                shutil.rmtree(folder, ignore_errors=True)
            removed += refs
            count, total = count - 1, total - run["bytes"]
        for owner_dir in (self.root / FINETUNED).glob("*"):
            if owner_dir.is_dir() and not owner_dir.name.startswith(".") and not any(owner_dir.iterdir()):
                owner_dir.rmdir()
        return removed

    def zip_checkpoint(self, ref: str, owner: str | None, dest: str | os.PathLike) -> Path:
        """A zip of one of the visitor's checkpoints (`<name>/` and its files), written into `dest`."""
        ref = self.check(ref, owner)
        folder = self.root / ref
        if not folder.is_dir():
            raise CheckpointError(REFUSED if self.shared else f"{ref} is not a checkpoint folder here")
        read_card(folder)
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        target = dest / f"{folder.name}.zip"
        with atomic.replacing(target, durable=False) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for path in sorted(folder.rglob("*")):
                if path.is_file() and not path.name.startswith("."):
                    z.write(path, f"{folder.name}/{path.relative_to(folder)}")
        return target
