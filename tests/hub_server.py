"""A Hugging Face Hub on 127.0.0.1 for tests: the routes the real huggingface_hub 2.4 client reads a model
repo through, answered as the Hub answers them.

    GET  /api/models/<id>[/revision/<rev>][?blobs=True]   model_info: sha, siblings (sizes and LFS with blobs)
    GET  /api/models/<id>/tree/<rev>?recursive=True       list_repo_tree, as snapshot_download lists a commit
    HEAD /<id>/resolve/<rev>/<file>                        hf_hub_download's metadata: X-Repo-Commit, ETag and
                                                           Content-Length; an LFS file answers 302 to the CDN
                                                           with X-Linked-Etag and X-Linked-Size
    GET  /<id>/resolve/<rev>/<file>                        the bytes of a regular (git) file
    GET  <cdn>/lfs/<sha256>                                the bytes of an LFS file, from a second server: another
                                                           origin, as the Hub's CDN is, so the client reads the
                                                           metadata off the redirect and fetches from there

Errors carry X-Error-Code as the Hub's do (RepoNotFound, RevisionNotFound, EntryNotFound). A file may be
`Declared`: listed with a size it does not have here (a 2 GB file costs nothing); asking for its bytes is
answered 500. Every request is logged in `requests`, every request for a file's bytes in `fetched`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".h5", ".bin", ".safetensors")  # what the Hub's default .gitattributes sends to LFS
GITATTRIBUTES = b"*.h5 filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"


@dataclass(frozen=True)
class Declared:
    """A file the Hub lists with `size` bytes that are not served."""
    size: int


class _File:
    def __init__(self, name: str, content: bytes | Declared):
        self.data = None if isinstance(content, Declared) else bytes(content)
        self.size = content.size if isinstance(content, Declared) else len(self.data)
        seed = self.data if self.data is not None else f"{name}:{self.size}".encode()
        self.sha256 = hashlib.sha256(seed).hexdigest()
        self.lfs = name.endswith(LFS_SUFFIXES)
        # Git's object id of what git stores: the file, or for LFS its pointer.
        self.pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\n"
                        f"size {self.size}\n").encode()
        stored = self.pointer if self.lfs else seed
        self.oid = hashlib.sha1(b"blob %d\0" % len(stored) + stored).hexdigest()


class FakeHub:
    """Repos (commits of files, refs) served on two ephemeral ports: the Hub at `url`, its CDN beside it."""

    def __init__(self):
        self.repos: dict[str, dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.fetched: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []
        self.url = self.cdn_url = ""

    def add_repo(self, repo_id: str, commits: dict[str, dict[str, bytes | Declared]],
                 refs: dict[str, str] | None = None, status: int | None = None) -> None:
        """`commits`: {sha: {path: content}}; `refs`: {"main": sha, ...}; `status`: every answer is this error."""
        self.repos[repo_id] = {
            "commits": {sha: {name: _File(name, content) for name, content in files.items()}
                        for sha, files in commits.items()},
            "refs": refs or {"main": next(iter(commits))}, "status": status}

    def start(self) -> FakeHub:
        for kind in ("hub", "cdn"):
            server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, kind))
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self._servers.append(server)
        self.url, self.cdn_url = (f"http://127.0.0.1:{s.server_address[1]}" for s in self._servers)
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def log(self, method: str, path: str) -> None:
        with self._lock:
            self.requests.append((method, path))

    def log_fetch(self, repo_id: str, name: str) -> None:
        with self._lock:
            self.fetched.append((repo_id, name))

    def commit(self, repo_id: str, revision: str) -> str | None:
        repo = self.repos[repo_id]
        sha = repo["refs"].get(revision, revision)
        return sha if sha in repo["commits"] else None

    def lfs_file(self, sha256: str) -> tuple[str, str, _File] | None:
        for repo_id, repo in self.repos.items():
            for files in repo["commits"].values():
                for name, f in files.items():
                    if f.lfs and f.sha256 == sha256:
                        return repo_id, name, f
        return None


def _handler(hub: FakeHub, kind: str):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # the test log is `hub.requests`
            pass

        def do_HEAD(self):
            self._route(head=True)

        def do_GET(self):
            self._route(head=False)

        def do_POST(self):
            hub.log("POST", self.path)
            self._answer(405, b"", error=("MethodNotAllowed", "not emulated"))

        def _answer(self, status, body=b"", headers=None, head=False, error=None,
                    content_type="application/json", length=None):
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            if error:
                self.send_header("X-Error-Code", error[0])
                self.send_header("X-Error-Message", error[1])
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _json(self, data, head=False):
            self._answer(200, json.dumps(data).encode(), head=head)

        def _route(self, head: bool):
            method = "HEAD" if head else "GET"
            split = urlsplit(self.path)
            parts = split.path.strip("/").split("/")
            if kind == "cdn":
                hub.log(method, f"cdn:{split.path}")
                found = hub.lfs_file(parts[1]) if len(parts) == 2 and parts[0] == "lfs" else None
                if found is None:
                    return self._answer(404, head=head)
                if not head:
                    hub.log_fetch(found[0], found[1])
                return self._bytes(found[2], head)
            hub.log(method, self.path)
            api = parts[:2] == ["api", "models"]
            repo_id = "/".join(parts[2:4] if api else parts[:2])
            repo = hub.repos.get(repo_id)
            if len(parts) < (4 if api else 2) or repo is None:
                return self._answer(404, b'{"error":"Repository not found"}', head=head,
                                    error=("RepoNotFound", "Repository not found"))
            if repo["status"]:
                return self._answer(repo["status"], b'{"error":"Service Unavailable"}', head=head)
            rest = parts[4:] if api else parts[2:]
            if api and not rest:
                return self._info(repo_id, "main", split.query, head)
            if len(rest) < 2 or rest[0] not in (("revision", "tree") if api else ("resolve",)):
                return self._answer(404, head=head, error=("EntryNotFound", "not emulated"))
            revision = unquote(rest[1])
            sha = hub.commit(repo_id, revision)
            if sha is None:
                return self._answer(404, b'{"error":"Invalid rev id"}', head=head,
                                    error=("RevisionNotFound", f"Invalid rev id: {revision}"))
            if rest[0] == "revision":
                return self._info(repo_id, sha, split.query, head)
            if rest[0] == "tree":
                return self._tree(repo_id, sha, head)
            return self._resolve(repo_id, sha, unquote("/".join(rest[2:])), head)

        def _info(self, repo_id, revision, query, head):
            sha = hub.commit(repo_id, revision)
            blobs = parse_qs(query).get("blobs", [""])[0].lower() == "true"
            siblings = []
            for name, f in sorted(hub.repos[repo_id]["commits"][sha].items()):
                sibling = {"rfilename": name}
                if blobs:
                    sibling.update(blobId=f.oid, size=f.size)
                    if f.lfs:
                        sibling["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": len(f.pointer)}
                siblings.append(sibling)
            owner = repo_id.split("/")[0]
            self._json({"_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24], "id": repo_id,
                        "modelId": repo_id, "author": owner, "sha": sha, "private": False, "gated": False,
                        "disabled": False, "downloads": 0, "likes": 0, "tags": ["keras"],
                        "library_name": "keras", "lastModified": "2025-01-01T00:00:00.000Z",
                        "createdAt": "2025-01-01T00:00:00.000Z", "siblings": siblings}, head)

        def _tree(self, repo_id, sha, head):
            entries = []
            for name, f in sorted(hub.repos[repo_id]["commits"][sha].items()):
                entry = {"type": "file", "oid": f.oid, "size": f.size, "path": name}
                if f.lfs:
                    entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": len(f.pointer)}
                entries.append(entry)
            self._json(entries, head)

        def _resolve(self, repo_id, sha, name, head):
            f = hub.repos[repo_id]["commits"][sha].get(name)
            commit = {"X-Repo-Commit": sha}
            if f is None:
                return self._answer(404, head=head, headers=commit, error=("EntryNotFound", f"{name} not found"))
            if f.lfs:  # the Hub keeps LFS bytes elsewhere: a redirect carries their ETag and size
                return self._answer(302, head=head, headers={
                    **commit, "Location": f"{hub.cdn_url}/lfs/{f.sha256}", "ETag": f'"{f.oid}"',
                    "X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size)})
            if not head:
                hub.log_fetch(repo_id, name)
            self._bytes(f, head, {**commit, "ETag": f'"{f.oid}"'})

        def _bytes(self, f, head, headers=None):
            if f.data is None and not head:
                return self._answer(500, error=("Declared", "this file has no bytes here"))
            self._answer(200, f.data or b"", head=head, length=f.size, content_type="application/octet-stream",
                         headers={**(headers or {}), "ETag": f'"{f.sha256 if f.lfs else f.oid}"',
                                  "Accept-Ranges": "bytes"})

    return Handler
