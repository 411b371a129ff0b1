"""One Model's fetch: its files in parallel, then its tree of links (SHELL).

BEHAVIOUR §1.6. A ``ModelJob`` names every file of one Model with its URL,
digest and size; ``run(job)`` downloads the missing ones (``fetch.download``,
``max_parallel`` at a time), then links each verified blob to
``<cache>/models/<name>/<path>`` (a hard link: the server sees a plain file
inside the Model's root; a new link replaces an old one atomically).

A pass never runs this itself: ``engine`` starts it as a detached process,
``python -m reconciler.models.fetchmodel JOB.json`` (the job file is written
first, so that a pass killed right after the spawn still knows what runs),
which writes ``JOB.result.json`` when done. ``reconcile models fetch`` runs
it in the foreground with a progress bar. ``fetch.py`` (and ``http.client``) is
imported here, inside ``run``: a pass with nothing to fetch never loads it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Callable

import attrs

from reconciler.models.fetchpolicy import Failure, FileJob, Outcome, blob_path


@attrs.frozen(kw_only=True)
class ModelJob:
    model: str
    generation: str  # the digest of the file list: a new Model is a new generation
    cache: str
    tree: str  # <cache>/models/<name>
    files: tuple[tuple[str, str, str, int], ...]  # (path, url, sha256, size)
    max_parallel: int = 2
    token_file: str | None = None
    token_origin: str = ""
    verify: bool | str = True

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self, recurse=True), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ModelJob":
        raw = json.loads(text)
        raw["files"] = tuple(tuple(f) for f in raw["files"])
        return cls(**raw)


@attrs.frozen(kw_only=True)
class ModelOutcome:
    ok: bool
    failure: str | None = None  # a fetchpolicy.Failure value
    detail: str = ""
    fetched: int = 0


def run(job: ModelJob, progress: Callable[[int], None] | None = None) -> ModelOutcome:
    """Fetch every missing file of ``job``, then link the Model's tree."""
    from concurrent.futures import ThreadPoolExecutor

    from reconciler.models import fetch  # http.client only when something is fetched

    token = None
    if job.token_file:
        try:
            with open(job.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            return ModelOutcome(ok=False, failure=Failure.TOKEN,
                                detail=f"{job.model}: cannot read hf_token_file "
                                       f"{job.token_file}: {exc.strerror or exc}")
    jobs = [FileJob(url=url, sha256=sha, size=size, cache=job.cache, label=f"{job.model}: {path}",
                    token=token, token_origin=job.token_origin, verify=job.verify)
            for path, url, sha, size in job.files]
    with ThreadPoolExecutor(max_workers=max(1, job.max_parallel)) as pool:
        outcomes: list[Outcome] = list(pool.map(
            lambda j: fetch.download(j, progress=progress), jobs))
    fetched = sum(o.fetched for o in outcomes)
    failed = [o for o in outcomes if not o.ok]
    if failed:
        first = failed[0]
        return ModelOutcome(ok=False, failure=first.failure, fetched=fetched,
                            detail="; ".join(o.detail for o in failed))
    try:
        for path, _, sha, _ in job.files:
            _link(blob_path(job.cache, sha), os.path.join(job.tree, path))
    except OSError as exc:
        return ModelOutcome(ok=False, failure=Failure.IO, fetched=fetched,
                            detail=f"{job.model}: cannot link {job.tree}: {exc.strerror or exc}")
    return ModelOutcome(ok=True, fetched=fetched, detail="fetched and verified")


def _link(blob: str, dest: str) -> None:
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    try:
        if os.path.samefile(blob, dest):
            return
    except FileNotFoundError:
        pass
    tmp = f"{dest}.link-{os.getpid()}"
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    os.link(blob, tmp)
    os.replace(tmp, dest)


def result_path(job_path: str) -> str:
    return job_path.removesuffix(".json") + ".result.json"


def main(argv: list[str]) -> int:
    """The detached fetch process: run the job file's fetch, write its result beside it."""
    (job_path,) = argv
    with open(job_path, encoding="utf-8") as f:
        job = ModelJob.from_json(f.read())
    return finish(job_path, run(job), job.generation)


def finish(job_path: str, outcome: ModelOutcome, generation: str) -> int:
    """Write a fetch's result beside its job file (a Model's or a Program's, §14)."""
    tmp = result_path(job_path) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(attrs.asdict(outcome) | {"generation": generation}, f)
    os.replace(tmp, result_path(job_path))
    print(outcome.detail, flush=True)
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
