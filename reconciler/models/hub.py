"""The Hugging Face Hub's words, read without IO (PURE): ``hf://`` names and file metadata.

BEHAVIOUR §1.6. ``reconcile models add hf://ORG/REPO/FILE@REVISION`` writes a
Model from the Hub's metadata alone, so a reviewer sees the digest in the pull
request before any byte moves. What the Hub answers to ``HEAD
/ORG/REPO/resolve/REVISION/FILE`` (as huggingface_hub's
``get_hf_file_metadata`` reads it):

* ``X-Repo-Commit``: the commit the revision resolves to (a branch moves; the
  document records this commit);
* ``X-Linked-Etag``: ``"<sha256>"`` of an LFS file (the ``ETag`` of a
  non-LFS file is a git blob id, not a sha256: such a file is refused here);
* ``X-Linked-Size``: its size (``Content-Length`` when not redirected).
"""

from __future__ import annotations

import re

import attrs

_HF = re.compile(r"^hf://(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95})"
                 r"/(?P<path>[^@]+?)(?:@(?P<rev>[A-Za-z0-9][A-Za-z0-9._/-]{0,127}))?$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@attrs.frozen(kw_only=True)
class HubName:
    repo: str
    path: str  # the file's path in the repository
    revision: str  # as given: a commit, a branch or a tag ("main" by default)


@attrs.frozen(kw_only=True)
class FileMeta:
    sha256: str
    size: int
    commit: str | None  # X-Repo-Commit


def parse_name(text: str) -> HubName:
    """``hf://ORG/REPO/FILE[@REVISION]``; ValueError saying the shape otherwise."""
    m = _HF.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not hf://ORG/REPO/FILE[@REVISION]")
    return HubName(repo=m["repo"], path=m["path"], revision=m["rev"] or "main")


def resolve_url(endpoint: str, repo: str, revision: str, path: str) -> str:
    return f"{endpoint.rstrip('/')}/{repo}/resolve/{revision}/{path}"


def file_meta(headers: dict[str, str], what: str) -> FileMeta:
    """The sha256, size and commit in a HEAD answer's (lower-cased) headers."""
    etag = (headers.get("x-linked-etag") or "").strip().removeprefix("W/").strip('"')
    if not _HEX64.match(etag):
        raise ValueError(f"{what}: the Hub gives no sha256 for it (not an LFS file: its ETag "
                         f"is {headers.get('etag', 'absent')}); download it and run "
                         "`reconcile models add` on the file")
    size_text = headers.get("x-linked-size") or headers.get("content-length") or ""
    if not size_text.isdigit():
        raise ValueError(f"{what}: the Hub gives no size for it")
    commit = headers.get("x-repo-commit")
    if commit is not None and not _COMMIT.match(commit):
        raise ValueError(f"{what}: X-Repo-Commit {commit!r} is not a commit")
    return FileMeta(sha256=etag, size=int(size_text), commit=commit)


def url_meta(headers: dict[str, str], sha256: str | None, what: str) -> FileMeta:
    """A plain URL: its size from the answer; its sha256 given, or the Hub's if it is one."""
    size_text = headers.get("x-linked-size") or headers.get("content-length") or ""
    if not size_text.isdigit():
        raise ValueError(f"{what}: the server states no size (Content-Length)")
    linked = (headers.get("x-linked-etag") or "").strip().strip('"')
    digest = sha256 or (linked if _HEX64.match(linked) else None)
    if digest is None:
        raise ValueError(f"{what}: the server does not state the file's sha256: give "
                         "--sha256 (as its publisher lists it)")
    if not _HEX64.match(digest):
        raise ValueError(f"--sha256 {digest!r} is not 64 lower-case hex digits")
    return FileMeta(sha256=digest, size=int(size_text), commit=None)
