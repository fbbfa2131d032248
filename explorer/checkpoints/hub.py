"""Hugging Face Hub transport: Hub ids, and folders down from and up to a model repo.

It moves folders (huggingface_hub is imported lazily). It knows the names of a checkpoint's files, so
that it fetches those and nothing else, and it reads their sizes on the Hub before fetching any: a
public Space shared by strangers never fills its disk because a visitor typed the id of a large repo.
What is in the files, and turning a reference into a checkpoint, is explorer.checkpoints' business;
the command line lives there too, with the checks it needs:

    python -m explorer.checkpoints push checkpoints/cifar10-spt_lsa owner/vit-spt-lsa-cifar10
    python -m explorer.checkpoints pull owner/vit-spt-lsa-cifar10@main

The limits (`download`'s max_bytes, `prune_cache`'s size) are the caller's: a shared instance takes them
from EXPLORER_MAX_HUB_MB and EXPLORER_MAX_HUB_CACHE_MB (explorer.checkpoints.finetuned.SharedLimits).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from explorer.core import atomic
from explorer.core.settings import Settings

# Hub rules: owner and name of letters, digits, '-', '_', '.', no '--' or '..', at most 96 characters.
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_REPO_ID = re.compile(rf"^{_PART}/{_PART}$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")

# The files of a checkpoint, at the top of its repo (explorer.checkpoints writes them); only these are
# fetched. The README is the Hub's model card: a checkpoint loads without it.
CHECKPOINT_FILES = ("explorer.json", "config.json", "metadata.json", "model.weights.h5", "README.md")
_CARD, _REQUIRED_FILES = CHECKPOINT_FILES[0], CHECKPOINT_FILES[:4]

MB = 10**6
_TIMEOUT_S = 10


class HubError(ValueError):
    """A Hub id that is malformed, or a repo that is not reachable, not cached, not a checkpoint or too large."""


def parse_ref(ref: str) -> tuple[str, str | None]:
    """`owner/name`, `owner/name@revision` or `hf://owner/name[@revision]` -> (repo_id, revision)."""
    if not isinstance(ref, str) or not ref.strip():
        raise HubError("empty Hub id; expected owner/name or owner/name@revision")
    text = ref.strip()
    if text.startswith("hf://"):
        text = text[len("hf://"):]
    repo_id, _, revision = text.partition("@")
    if not _REPO_ID.match(repo_id) or ".." in repo_id or "--" in repo_id:
        raise HubError(f"{ref!r} is not a valid Hub id: expected owner/name with letters, digits, "
                       f"'-', '_' or '.' (no spaces, no '..')")
    if revision and (not _REVISION.match(revision) or ".." in revision):
        raise HubError(f"{ref!r} has an invalid revision {revision!r}")
    return repo_id, revision or None


def looks_like_repo_id(text: str) -> bool:
    """True for text shaped like a Hub id (one '/', no path-like prefixes) that is not a local path."""
    text = text.strip()
    if text.startswith("hf://"):
        return True
    if text.startswith((".", "/", "~")) or text.count("/") != 1 or Path(text).exists():
        return False
    return True


def is_offline() -> bool:
    """HF_HUB_OFFLINE as it is now (huggingface_hub reads it once, at import)."""
    from huggingface_hub import constants
    return Settings.read("hf_hub_offline") or bool(constants.HF_HUB_OFFLINE)


def _size(n: int) -> str:
    if n >= 1000 * MB:
        return f"{n / (1000 * MB):.1f} GB"
    if n >= 10 * MB:
        return f"{n / MB:.0f} MB"
    return f"{n / MB:.1f} MB" if n >= MB else f"{n / 1000:.0f} kB"


def _client():
    try:
        import huggingface_hub
        from huggingface_hub import errors
    except ImportError:
        raise HubError("huggingface_hub is not installed; pip install huggingface-hub") from None
    return huggingface_hub, errors


def _from_cache(repo_id: str, revision: str | None, cache_dir: str | None, where: str, state: str,
                patterns: Iterable[str] = CHECKPOINT_FILES) -> Path:
    """The cached snapshot, without a request; `state` says why the Hub is not asked."""
    huggingface_hub, errors = _client()
    try:
        folder = huggingface_hub.snapshot_download(repo_id, revision=revision, cache_dir=cache_dir,
                                                   repo_type="model", local_files_only=True,
                                                   allow_patterns=list(patterns))
    except errors.LocalEntryNotFoundError:
        raise HubError(f"{where} is not in the local Hugging Face cache and {state}") from None
    except OSError as e:
        raise HubError(f"{where}: cannot be read from the cache ({type(e).__name__}: {e})") from None
    return Path(folder)


def checkpoint_files(listed: dict[str, int | None], where: str) -> list[str]:
    """The checkpoint files among those a repo lists ({file: bytes}); refuses a repo that is not a checkpoint."""
    missing = [name for name in _REQUIRED_FILES if name not in listed]
    if missing:  # without the card it is someone else's repo: naming the other files would only confuse
        shown = _CARD if _CARD in missing else ", ".join(missing)
        raise HubError(f"{where} is not an explorer checkpoint: it has no {shown}")
    return [name for name in CHECKPOINT_FILES if name in listed]


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which files of a repo to fetch.

    Args:
        pick: (files the Hub lists, {path: bytes or None}; the repo's name for messages) -> the paths to
            fetch; raises HubError for a repo that holds nothing of the kind.
        patterns: snapshot_download's allow_patterns for the cache, offline, with no list to pick from.
            huggingface_hub then checks that the cached snapshot holds every file of the repo's (cached)
            listing that they match, so they name only files `pick` fetches whenever the repo has them.
        what: the files in words, for the size message ("its checkpoint files are 812 MB").
    """

    pick: Callable[[dict[str, int | None], str], list[str]]
    patterns: tuple[str, ...]
    what: str


CHECKPOINT = Selection(checkpoint_files, CHECKPOINT_FILES, "checkpoint files")


def _sizes(info, where: str, selection: Selection) -> dict[str, int]:
    """{file: bytes} of the files `selection` picks among those the Hub lists for a repo."""
    listed = {}
    for sibling in info.siblings or []:
        listed[sibling.rfilename] = sibling.lfs.size if sibling.lfs is not None else sibling.size
    sizes = {name: listed[name] for name in selection.pick(listed, where)}
    unknown = [name for name, size in sizes.items() if not isinstance(size, int)]
    if unknown:
        raise HubError(f"{where}: the Hub did not give the size of {', '.join(unknown)}; not fetching it")
    return sizes


def _remember_ref(cache_dir: str | None, repo_id: str, revision: str, commit: str) -> None:
    """refs/<revision> -> commit in the cache, as huggingface_hub writes it, so that offline use finds it."""
    from huggingface_hub import constants
    refs = Path(cache_dir or constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}" / "refs"
    path = refs / revision
    if revision == commit or (path.is_file() and path.read_text() == commit):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, commit, durable=False)


def download(ref: str, cache_dir: str | None = None, max_bytes: int | None = None,
             selection: Selection = CHECKPOINT) -> Path:
    """A local snapshot folder of a Hub checkpoint repo at the pinned revision, holding only its
    CHECKPOINT_FILES (or the files another `selection` picks).

    Online, the Hub's file list is read first: a repo without the checkpoint files, or whose files
    together exceed `max_bytes` (None: no limit), is refused before anything is
    written to the cache. Offline (HF_HUB_OFFLINE), or when the Hub does not answer, it comes from the
    cache, without a request.
    """
    repo_id, revision = parse_ref(ref)
    huggingface_hub, errors = _client()
    from huggingface_hub.utils import httpx

    where = f"{repo_id}@{revision}" if revision else repo_id
    if is_offline():
        return _from_cache(repo_id, revision, cache_dir, where, "offline (HF_HUB_OFFLINE=1)", selection.patterns)
    try:
        info = huggingface_hub.HfApi().model_info(repo_id, revision=revision, files_metadata=True,
                                                  timeout=_TIMEOUT_S)
    except errors.RevisionNotFoundError:
        raise HubError(f"{where}: revision {revision!r} does not exist") from None
    except errors.RepositoryNotFoundError:
        raise HubError(f"{where}: no such model repo on the Hub (or it is private)") from None
    except errors.HfHubHTTPError as e:  # the Hub is down: what the cache holds still loads
        status = e.response.status_code if e.response is not None else "an error"
        return _from_cache(repo_id, revision, cache_dir, where, f"the Hub answered {status}", selection.patterns)
    except httpx.TransportError:
        return _from_cache(repo_id, revision, cache_dir, where, "the Hub is unreachable", selection.patterns)
    if not info.sha:
        raise HubError(f"{where}: the Hub did not name the commit it lists; not fetching it")
    sizes = _sizes(info, where, selection)
    total = sum(sizes.values())
    if max_bytes is not None and total > max_bytes:
        raise HubError(f"{where}: its {selection.what} are {_size(total)}; this app fetches at most "
                       f"{_size(max_bytes)} from the Hub (EXPLORER_MAX_HUB_MB)")
    try:
        # At the commit whose sizes were checked: a branch that moves meanwhile changes nothing.
        folder = huggingface_hub.snapshot_download(repo_id, revision=info.sha, cache_dir=cache_dir,
                                                   repo_type="model", allow_patterns=list(sizes),
                                                   etag_timeout=_TIMEOUT_S)
    except errors.HfHubHTTPError as e:
        raise HubError(f"{where}: the Hub answered {e}") from None
    except (OSError, httpx.TransportError) as e:
        raise HubError(f"{where}: cannot be fetched ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    try:
        _remember_ref(cache_dir, repo_id, revision or "main", info.sha)
    except OSError:  # a read-only cache: the folder is there, only offline look-ups by name miss it
        pass
    return Path(folder)


def prune_cache(cache_dir: str | os.PathLike | None, max_bytes: int,
                keep: Iterable[str | os.PathLike] = ()) -> list[str]:
    """Removes whole cached repos, least recently used first, until the Hugging Face cache holds at most
    `max_bytes`; a repo with a path in `keep` (a snapshot folder in use)
    stays. Returns the ids of the repos removed, in order.
    """
    from huggingface_hub import constants, scan_cache_dir

    root = Path(cache_dir or constants.HF_HUB_CACHE)
    if not root.is_dir():
        return []
    cache = scan_cache_dir(root)
    kept = [Path(p).resolve() for p in keep]
    size = cache.size_on_disk
    removed = []
    # atime is not updated on every file system (noatime): the download time counts as a use too.
    for repo in sorted(cache.repos, key=lambda r: (max(r.last_accessed, r.last_modified), r.repo_id)):
        if size <= max_bytes:
            break
        if not repo.revisions or any(k == repo.repo_path or repo.repo_path in k.parents for k in kept):
            continue
        # A commit hash names a revision in every repo that has it (a duplicated repo keeps its history):
        # the deletion is planned over this repo alone.
        alone = dataclasses.replace(cache, repos=frozenset([repo]))
        alone.delete_revisions(*(r.commit_hash for r in repo.revisions)).execute()
        size -= repo.size_on_disk
        removed.append(repo.repo_id)
    return removed


def upload(folder: str | os.PathLike, repo_id: str, private: bool = False, token: str | None = None,
           commit_message: str | None = None, leave_out: Iterable[str] = ()) -> str:
    """Uploads a folder to the model repo `repo_id` (created if needed), but for hidden files and the file
    names in `leave_out`; returns the commit URL.

    The token comes from the argument, $HF_TOKEN or `hf auth login`.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise HubError(f"{folder} is not a folder")
    repo_id, revision = parse_ref(repo_id)
    if revision:
        raise HubError("push takes owner/name without @revision")
    from huggingface_hub import HfApi
    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                             commit_message=commit_message or f"Upload {folder.name}",
                             ignore_patterns=[".*", "__pycache__", *leave_out])
    return str(getattr(info, "commit_url", info))
