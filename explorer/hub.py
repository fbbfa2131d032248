"""Hugging Face Hub transport: Hub ids, and folders down from and up to a model repo.

It moves folders and knows nothing of what is in them (huggingface_hub is imported lazily); whether a
folder is a checkpoint, and turning a reference into one, is explorer.checkpoints' business. The
command line lives there too, with the checks it needs:

    python -m explorer.hub push checkpoints/cifar10-spt_lsa owner/vit-spt-lsa-cifar10
    python -m explorer.hub pull owner/vit-spt-lsa-cifar10@main
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

# Hub rules: owner and name of letters, digits, '-', '_', '.', no '--' or '..', at most 96 characters.
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_REPO_ID = re.compile(rf"^{_PART}/{_PART}$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")


class HubError(ValueError):
    """A Hub id that is malformed, or a repo that is not reachable or not cached."""


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
    value = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return value in ("1", "ON", "YES", "TRUE") or bool(constants.HF_HUB_OFFLINE)


def download(ref: str, cache_dir: str | None = None) -> Path:
    """A local snapshot folder of a Hub model repo (from the cache when offline) at the pinned revision."""
    repo_id, revision = parse_ref(ref)
    try:
        import huggingface_hub
        from huggingface_hub import errors
    except ImportError:
        raise HubError("huggingface_hub is not installed; pip install huggingface-hub") from None
    offline = is_offline()
    where = f"{repo_id}@{revision}" if revision else repo_id
    try:
        # Offline, ask the cache only: no request, no retries, an answer at once.
        folder = huggingface_hub.snapshot_download(repo_id, revision=revision, cache_dir=cache_dir,
                                                   repo_type="model", local_files_only=offline,
                                                   etag_timeout=5)
    except errors.RevisionNotFoundError:
        raise HubError(f"{where}: revision {revision!r} does not exist") from None
    except errors.RepositoryNotFoundError:
        raise HubError(f"{where}: no such model repo on the Hub (or it is private)") from None
    except (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled):
        state = "offline (HF_HUB_OFFLINE=1)" if offline else "the Hub is unreachable"
        raise HubError(f"{where} is not in the local Hugging Face cache and {state}") from None
    except errors.HfHubHTTPError as e:
        raise HubError(f"{where}: the Hub answered {e}") from None
    except OSError as e:
        raise HubError(f"{where}: cannot be fetched ({type(e).__name__}: {e})") from None
    return Path(folder)


def upload(folder: str | os.PathLike, repo_id: str, private: bool = False, token: str | None = None,
           commit_message: str | None = None) -> str:
    """Uploads a folder to the model repo `repo_id` (created if needed); returns the commit URL.

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
                             ignore_patterns=[".*", "__pycache__"])
    return str(getattr(info, "commit_url", info))


if __name__ == "__main__":  # `python -m explorer.hub`: the CLI checks checkpoints, so it lives there
    from explorer.checkpoints import main
    sys.exit(main())
