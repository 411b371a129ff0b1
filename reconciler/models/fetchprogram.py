"""One Program's fetch: its release archive into the blob cache, then its tree (SHELL; §14).

The same fetcher as a Model's (§1.6): ``fetch.download`` brings the archive
to ``<cache>/blobs/<sha256>`` — resumed with ``Range``, bounded by the
declared size, hashed while it arrives, renamed into place only once its
digest matches — and the same detached protocol (``JOB.json`` written first,
``JOB.result.json`` at the end, ``fetchmodel.finish``). Then, unlike a Model,
the archive is unpacked (``unpack.extract``: nothing outside the tree, no
device, no more bytes than declared) into a fresh directory beside the tree,
every file it holds is hashed and must be exactly the Program's list (no
file missing, none extra, each digest equal), and only then is the directory
renamed to ``<cache>/programs/<name>/<16 hex>`` (atomic). Nothing unverified
is ever at the path a server is started from.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import attrs

from reconciler.models import fetchmodel
from reconciler.models.fetchmodel import ModelOutcome
from reconciler.models.fetchpolicy import Failure, FileJob, blob_path


@attrs.frozen(kw_only=True)
class ProgramJob:
    program: str
    generation: str  # the digest of the file list: the tree's name
    cache: str
    tree: str  # <cache>/programs/<name>/<16 hex>
    url: str
    sha256: str  # the archive's
    size: int  # the archive's
    strip: int
    files: tuple[tuple[str, str, int], ...]  # (path, sha256, size) of each file it holds
    verify: bool | str = True

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self, recurse=True) | {"kind": "program"},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ProgramJob":
        raw = json.loads(text)
        raw.pop("kind", None)
        raw["files"] = tuple(tuple(f) for f in raw["files"])
        return cls(**raw)


def run(job: ProgramJob, progress=None) -> ModelOutcome:
    """Fetch the archive (or find it in the cache), unpack it, verify every file, rename."""
    from reconciler.models import fetch, unpack  # http.client only when something is fetched
    from reconciler.models.modelstore import hash_file

    if os.path.isdir(job.tree):
        return ModelOutcome(ok=True, detail="already in the cache")
    name = job.url.rstrip("/").rsplit("/", 1)[-1]
    got = fetch.download(FileJob(url=job.url, sha256=job.sha256, size=job.size, cache=job.cache,
                                 label=f"program {job.program}: {name}", verify=job.verify),
                         progress=progress)
    if not got.ok:
        return ModelOutcome(ok=False, failure=got.failure, detail=got.detail, fetched=got.fetched)
    work = f"{job.tree}.unpack-{os.getpid()}"
    try:
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        limit = sum(size for _, _, size in job.files)
        written = unpack.extract(blob_path(job.cache, job.sha256), work,
                                 kind=unpack.kind_of(job.url), strip=job.strip, limit=limit)
        problem = _compare(job, {p: hash_file(os.path.join(work, p)).stamp.sha256
                                 for p, _ in written})
        if problem:
            shutil.rmtree(work, ignore_errors=True)
            return ModelOutcome(ok=False, failure=Failure.MISMATCH, fetched=got.fetched,
                                detail=f"program {job.program}: {problem}; nothing unpacked "
                                       "was kept")
        os.rename(work, job.tree)
    except unpack.Unsafe as exc:
        shutil.rmtree(work, ignore_errors=True)
        return ModelOutcome(ok=False, failure=Failure.MISMATCH, fetched=got.fetched,
                            detail=f"program {job.program}: {name}: {exc}")
    except (OSError, EOFError, ValueError) as exc:  # a corrupt archive that hashed right
        shutil.rmtree(work, ignore_errors=True)
        return ModelOutcome(ok=False, failure=Failure.IO, fetched=got.fetched,
                            detail=f"program {job.program}: cannot unpack {name}: {exc}")
    return ModelOutcome(ok=True, fetched=got.fetched, detail="fetched, unpacked and verified")


def _compare(job: ProgramJob, found: dict[str, str]) -> str:
    """Why the unpacked files are not exactly the Program's, or ''."""
    declared = {p: sha for p, sha, _ in job.files}
    missing = sorted(set(declared) - set(found))
    if missing:
        return f"the archive lacks {', '.join(missing)}"
    extra = sorted(set(found) - set(declared))
    if extra:
        return f"the archive holds files the Program does not name: {', '.join(extra)}"
    for path in sorted(declared):
        if found[path] != declared[path]:
            return (f"{path} in the archive has sha256 {found[path]}, the Program says "
                    f"{declared[path]}")
    return ""


def main(argv: list[str]) -> int:
    """The detached fetch process: run the job file's fetch, write its result beside it."""
    (job_path,) = argv
    with open(job_path, encoding="utf-8") as f:
        job = ProgramJob.from_json(f.read())
    return fetchmodel.finish(job_path, run(job), job.generation)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
