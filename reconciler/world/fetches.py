"""Model (and §14 Program) fetches on this node: what the cache holds, what runs, starting one (SHELL).

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
from reconciler.core.desired import Desired, ModelSpec, ProgramSpec, program_key
from reconciler.core.observed import FetchObservation, FetchRecord, FetchState
from reconciler.manifests.fleet import fetched_models  # noqa: F401 (models fetch uses it here)
from reconciler.models import fetchmodel, fetchprogram
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
        out.append(_observed(fetch.cache, model.name, gen, total, done, done == total and linked,
                             by_model.get(model.name), free, now, fetch.hf_token_file))
    for program in fetched_programs(desired):  # §14 the same cache, the same protocol
        source, key = program.source, program_key(program.name)
        assert source is not None and program.root is not None
        done = _archive_done(fetch.cache, source.sha256, source.size)
        out.append(_observed(fetch.cache, key, program.digest[:16], source.size, done,
                             os.path.isdir(program.root), by_model.get(key), free, now, None))
    return tuple(out)


def fetched_programs(desired: Desired) -> tuple[ProgramSpec, ...]:
    """§14 the Programs with a release archive that a managed role of this node runs."""
    if desired.node.fetch is None:
        return ()
    used = {p for r in desired.roles if r.managed and (p := desired.program_for(r))}
    return tuple(sorted((p for p in used if p.source is not None and p.root is not None),
                        key=lambda p: p.name))


def _observed(cache: str, name: str, gen: str, total: int, done: int, here: bool,
              rec: FetchRecord | None, free: int | None, now: float,
              token_file: str | None) -> FetchObservation:
    base = dict(model=name, generation=gen, total=total, missing=total - done, free=free)
    if rec is not None and rec.generation == gen and rec.pid is not None \
            and procs.is_running(rec.pid, rec.create_time):
        elapsed = now - rec.started_at
        rate = (done - rec.done_at_start) / elapsed if elapsed > 1 else None
        return FetchObservation(state=FetchState.RUNNING, rate=rate or None, pid=rec.pid, **base)
    if here:
        return FetchObservation(state=FetchState.DONE, **base)
    return _after_result(cache, name, gen, token_file, now, base)


def _archive_done(cache: str, sha256: str, size: int) -> int:
    """Bytes of a Program's archive in the cache (the blob, or its partial file)."""
    for path in (blob_path(cache, sha256), partial_path(cache, sha256)):
        try:
            return min(os.stat(path).st_size, size)
        except OSError:
            pass
    return 0


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
    fetch = desired.node.fetch
    program = next((p for p in fetched_programs(desired)
                    if program_key(p.name) == planned.model), None)
    if program is not None and fetch is not None:  # §14
        source = program.source
        assert source is not None and program.root is not None
        job = fetchprogram.ProgramJob(
            program=program.name, generation=program.digest[:16], cache=fetch.cache,
            tree=program.root, url=source.url, sha256=source.sha256, size=source.size,
            strip=source.strip, files=tuple((f.path, f.sha256, f.size or 0)
                                            for f in program.files))
        return _spawn(planned, job.to_json(), job.generation, source.size,
                      "reconciler.models.fetchprogram", fetch.cache, store, now)
    model = desired.model(planned.model)
    if model is None or fetch is None or model.root is None:
        return f"{planned.model}: not a Model this node fetches"
    job = model_job(model, desired)
    return _spawn(planned, job.to_json(), job.generation,
                  sum(f.size or 0 for f in model.files), "reconciler.models.fetchmodel",
                  fetch.cache, store, now)


def _spawn(planned: Fetch, job_text: str, generation: str, total: int, module: str,
           cache: str, store, now: float) -> str:
    """Write the job file and the intent, then start the detached fetch process."""
    name = planned.model
    path = job_path(cache, name)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(job_text)
        os.replace(path + ".tmp", path)
        try:
            os.unlink(fetchmodel.result_path(path))  # the last result is not this one's
        except FileNotFoundError:
            pass
        log = os.open(path.removesuffix(".json") + ".log",
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        return f"{name}: cannot write the fetch job in {cache}: {exc.strerror or exc}"
    done = total - planned.bytes
    record = FetchRecord(model=name, generation=generation, started_at=now,
                         done_at_start=done)
    store.put_fetch(record)  # the intent: written before the process exists
    failpoints.reach("fetch-intent")
    try:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        started = programs.start([sys.executable, "-m", module, path],
                                 env=env, cwd=os.path.dirname(path), output=log)
    finally:
        os.close(log)
    failpoints.reach("fetch-spawned")
    if started.pid is None:
        store.delete_fetch(name)
        return f"{name}: cannot start the fetch: {started.failure}"
    store.put_fetch(FetchRecord(model=name, generation=generation, pid=started.pid,
                                create_time=procs.create_time(started.pid), started_at=now,
                                done_at_start=done))
    return ""
