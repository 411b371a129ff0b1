"""Model fetches on this node: what the cache holds, what runs, starting one (SHELL).

BEHAVIOUR §1.6. ``observe`` makes one ``FetchObservation`` per Model with a
source that a managed role of this node serves from the cache (not from a
``model_roots`` copy): ``stat`` of each blob and partial file, the free space
of the cache's filesystem, the fetch process the store remembers (alive by
pid and create time), and the result file the last one left. Nothing is
hashed and nothing is downloaded here; ``fetch.py`` is never imported by a pass.

``start`` runs a planned ``Fetch`` as a detached process
(``python -m reconciler.models.fetchmodel JOB.json``, a session of its own,
so it outlives the ``--once`` that started it): the job file and the store's
row (its pid unknown: the intent) are written first, the pid right after the
spawn. A killed fetch leaves its partial files; the next pass finds the
process gone and starts another, which resumes them with ``Range``.

Result files (``<cache>/jobs/<model>.result.json``): a mismatch or a server
sending too much is **failed** for that generation until a new one or
``reconcile models fetch --retry`` (which removes the file); an unreadable
token file is failed while it stays unreadable; any other failure is retried
after ``RETRY_AFTER`` seconds. A fetch that found its files locked by another
process (``reconcile models fetch`` in the foreground) reads as running.
"""

from __future__ import annotations

import json
import os
import sys

from reconciler.core.decisions import Fetch
from reconciler.core.desired import Desired, ModelSpec
from reconciler.core.observed import FetchObservation, FetchRecord, FetchState
from reconciler.manifests.fleet import fetched_models  # noqa: F401 (models fetch uses it here)
from reconciler.models import fetchmodel
from reconciler.models.fetchpolicy import STICKY, Failure, blob_path, origin, partial_path
from reconciler.system import failpoints, programs
from reconciler.world import procs

RETRY_AFTER = 30.0


def job_path(cache: str, model: str) -> str:
    return f"{cache.rstrip('/')}/jobs/{model}.json"


def observe(desired: Desired, records: tuple[FetchRecord, ...],
            now: float) -> tuple[FetchObservation, ...]:
    fetch = desired.node.fetch
    if fetch is None:
        return ()
    by_model = {r.model: r for r in records}
    free = _free(fetch.cache)
    out = []
    for model in fetched_models(desired):
        gen = model.fetch_generation(fetch.hf_endpoint)
        total = sum(f.size or 0 for f in model.files)
        done, linked = _done(fetch.cache, model)
        base = dict(model=model.name, generation=gen, total=total, missing=total - done,
                    free=free)
        rec = by_model.get(model.name)
        if rec is not None and rec.generation == gen and rec.pid is not None \
                and procs.is_running(rec.pid, rec.create_time):
            elapsed = now - rec.started_at
            rate = (done - rec.done_at_start) / elapsed if elapsed > 1 else None
            out.append(FetchObservation(state=FetchState.RUNNING, rate=rate or None,
                                        pid=rec.pid, **base))
            continue
        if done == total and linked:
            out.append(FetchObservation(state=FetchState.DONE, **base))
            continue
        out.append(_after_result(fetch.cache, model.name, gen, fetch.hf_token_file, now, base))
    return tuple(out)


def _after_result(cache: str, model: str, gen: str, token_file: str | None, now: float,
                  base: dict) -> FetchObservation:
    """NEEDED, or FAILED/BACKOFF by the last fetch's result file."""
    path = fetchmodel.result_path(job_path(cache, model))
    try:
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
        when = os.stat(path).st_mtime
    except (OSError, ValueError):
        return FetchObservation(state=FetchState.NEEDED, **base)
    failure = result.get("failure")
    if result.get("generation") != gen or not failure:
        return FetchObservation(state=FetchState.NEEDED, **base)
    detail = str(result.get("detail", ""))
    if failure == Failure.BUSY and now - when < RETRY_AFTER:
        # another process (`reconcile models fetch`) holds the files: it is fetching them
        return FetchObservation(state=FetchState.RUNNING, **base)
    if failure in STICKY:
        return FetchObservation(state=FetchState.FAILED, detail=detail, **base)
    if failure == Failure.TOKEN and token_file and not os.access(token_file, os.R_OK):
        return FetchObservation(state=FetchState.FAILED, detail=detail, **base)
    if now - when < RETRY_AFTER:
        return FetchObservation(state=FetchState.BACKOFF, detail=detail, **base)
    return FetchObservation(state=FetchState.NEEDED, detail=detail, **base)


def _done(cache: str, model: ModelSpec) -> tuple[int, bool]:
    """Bytes of the Model in the cache (whole blobs and partial files); all linked?"""
    done, linked = 0, True
    for f in model.files:
        blob = blob_path(cache, f.sha256)
        try:
            st = os.stat(blob)
            done += st.st_size
            if model.root is None or not os.path.samefile(blob, os.path.join(model.root, f.path)):
                linked = False
            continue
        except OSError:
            linked = False
        try:
            done += min(os.stat(partial_path(cache, f.sha256)).st_size, f.size or 0)
        except OSError:
            pass
    return done, linked


def _free(path: str) -> int | None:
    """Bytes free for us on the filesystem that holds (or will hold) ``path``."""
    while True:
        try:
            st = os.statvfs(path)
            return st.f_bavail * st.f_frsize
        except FileNotFoundError:
            parent = os.path.dirname(path.rstrip("/")) or "/"
            if parent == path:
                return None
            path = parent
        except OSError:
            return None


def model_job(model: ModelSpec, desired: Desired) -> fetchmodel.ModelJob:
    fetch = desired.node.fetch
    assert fetch is not None and model.root is not None
    hub = origin(fetch.hf_endpoint)
    return fetchmodel.ModelJob(
        model=model.name, generation=model.fetch_generation(fetch.hf_endpoint),
        cache=fetch.cache, tree=model.root,
        files=tuple((f.path, model.fetch_url(f, fetch.hf_endpoint), f.sha256, f.size or 0)
                    for f in model.files),
        max_parallel=fetch.max_parallel, token_file=fetch.hf_token_file,
        token_origin=fetch.hf_endpoint if hub is not None else "",
    )


def start(planned: Fetch, desired: Desired, store, now: float) -> str:
    """Start ``planned`` as a detached process; '' or why it did not start."""
    model = desired.model(planned.model)
    fetch = desired.node.fetch
    if model is None or fetch is None or model.root is None:
        return f"{planned.model}: not a Model this node fetches"
    job = model_job(model, desired)
    path = job_path(fetch.cache, model.name)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(job.to_json())
        os.replace(path + ".tmp", path)
        try:
            os.unlink(fetchmodel.result_path(path))  # the last result is not this one's
        except FileNotFoundError:
            pass
        log = os.open(path.removesuffix(".json") + ".log",
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        return f"{model.name}: cannot write the fetch job in {fetch.cache}: {exc.strerror or exc}"
    done = sum(f.size or 0 for f in model.files) - planned.bytes
    record = FetchRecord(model=model.name, generation=job.generation, started_at=now,
                         done_at_start=done)
    store.put_fetch(record)  # the intent: written before the process exists
    failpoints.reach("fetch-intent")
    try:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        started = programs.start([sys.executable, "-m", "reconciler.models.fetchmodel", path],
                                 env=env, cwd=os.path.dirname(path), output=log)
    finally:
        os.close(log)
    failpoints.reach("fetch-spawned")
    if started.pid is None:
        store.delete_fetch(model.name)
        return f"{model.name}: cannot start the fetch: {started.failure}"
    store.put_fetch(FetchRecord(model=model.name, generation=job.generation, pid=started.pid,
                                create_time=procs.create_time(started.pid), started_at=now,
                                done_at_start=done))
    return ""
