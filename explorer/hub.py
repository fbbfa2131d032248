"""Hugging Face Hub pull and push of checkpoint folders (huggingface_hub is imported lazily).

    python -m explorer.hub push checkpoints/cifar10-spt_lsa owner/vit-spt-lsa-cifar10
    python -m explorer.hub pull owner/vit-spt-lsa-cifar10@main
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from explorer.checkpoints import CheckpointError, is_checkpoint, read_card

# Hub rules: owner and name of letters, digits, '-', '_', '.', no '--' or '..', at most 96 characters.
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_REPO_ID = re.compile(rf"^{_PART}/{_PART}$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")


class HubError(CheckpointError):
    """A Hub id that is malformed, not reachable, not cached, or not a checkpoint."""


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
    """A local snapshot folder of a Hub checkpoint (from the cache when offline) at the pinned revision."""
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
    folder = Path(folder)
    if not is_checkpoint(folder):
        raise HubError(f"{where} is not an explorer checkpoint (it lacks explorer.json or the Keras "
                       f"files config.json, metadata.json, model.weights.h5)")
    return folder


def push(checkpoint_dir: str | os.PathLike, repo_id: str, private: bool = False,
         token: str | None = None, commit_message: str | None = None) -> str:
    """Uploads a checkpoint folder to `repo_id` (created if needed); returns the commit URL.

    The token comes from the argument, $HF_TOKEN or `huggingface-cli login`.
    """
    folder = Path(checkpoint_dir)
    if not is_checkpoint(folder):
        raise CheckpointError(f"{folder} is not an explorer checkpoint folder")
    card = read_card(folder)
    repo_id, revision = parse_ref(repo_id)
    if revision:
        raise HubError("push takes owner/name without @revision")
    from huggingface_hub import HfApi
    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                             commit_message=commit_message or f"Upload {card.get('name')}",
                             ignore_patterns=[".*", "__pycache__"])
    return str(getattr(info, "commit_url", info))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m explorer.hub", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    push_p = sub.add_parser("push", help="upload a checkpoint folder to a Hub model repo")
    push_p.add_argument("checkpoint")
    push_p.add_argument("repo_id")
    push_p.add_argument("--private", action="store_true")
    pull_p = sub.add_parser("pull", help="download a checkpoint into the HF cache and print its folder")
    pull_p.add_argument("ref", help="owner/name[@revision]")
    args = p.parse_args(argv)
    try:
        if args.command == "push":
            print(push(args.checkpoint, args.repo_id, private=args.private))
        else:
            print(download(args.ref))
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
