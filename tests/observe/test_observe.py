"""observe(): which roles, which probes, process facts, exposure and port_taken."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Iterator

import attrs
import psutil
import pytest

from reconciler.core.ownership import MARKER_ENV
from reconciler.core.desired import (
    Desired,
    Mode,
    ModelFile,
    ModelFormat,
    ModelSourceInfo,
    ModelSpec,
    ProgramSpec,
    RoleSpec,
    Runtime,
    ServeSpec,
)
from reconciler.core.observed import Health, ProcessFacts, Remembered, RoleRecord
from reconciler.core.observed import ServerProcess, flat_record
from reconciler.world.observe import observe, probe_all, target, with_process
from tests.doubles.ollama import OllamaDouble
from tests.observe.servers import Scripted, Silent, free_port

LISTENER = textwrap.dedent(
    """
    import socket, sys, time
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], int(sys.argv[2])))
    s.listen(8)
    print("ready", flush=True)
    time.sleep(60)
    """
)


class Child:
    """A marked child in its own session listening on host:port (a stand-in server)."""

    def __init__(self, host: str, port: int, marker: str | None) -> None:
        env = {"PATH": "/usr/bin:/bin"}
        if marker:
            env[MARKER_ENV] = marker
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LISTENER, host, str(port)],
            env=env, stdout=subprocess.PIPE, start_new_session=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == b"ready"
        self.pid = self.proc.pid
        self.create_time = psutil.Process(self.pid).create_time()

    def close(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=5)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def children() -> Iterator[list[Child]]:
    made: list[Child] = []
    yield made
    for child in made:
        child.close()


def managed(name: str, port: int, runtime: Runtime = Runtime.LLAMACPP, **kw: object) -> RoleSpec:
    return RoleSpec(
        name=name, runtime=runtime, mode=Mode.MANAGED, model=name,
        serve=ServeSpec(port=port), **kw,  # type: ignore[arg-type]
    )


def record(name: str, port: int, child: Child | None = None, **kw: object) -> RoleRecord:
    return flat_record(
        name=name, instance_id=f"{name}-0000abcd", runtime=kw.pop("runtime", Runtime.LLAMACPP),  # type: ignore[arg-type]
        mode=Mode.MANAGED, port=port,
        pid=child.pid if child else None, create_time=child.create_time if child else None,
        **kw,  # type: ignore[arg-type]
    )


# ---------------------------------------------------------------- which roles


def test_removed_role_is_observed_with_its_process(children: list[Child]) -> None:
    """A role only the store remembers still gets its process facts (to be stopped)."""
    port = free_port()
    child = Child("127.0.0.1", port, "gone-0000abcd")
    children.append(child)
    obs = observe(Desired(), Remembered(roles=(record("gone", port, child),)), probe_timeout=0.2)
    (role,) = obs.roles
    assert role.name == "gone"
    assert role.process is not None and role.process.owned and role.process.alive
    assert role.process.listen == (f"127.0.0.1:{port}",)
    assert role.exposed == () and role.port_taken is False
    assert obs.models == ()


def test_recycled_pid_is_not_owned(children: list[Child]) -> None:
    """The recorded pid lives but carries another marker: not ours, and its port is 'taken'."""
    port = free_port()
    child = Child("127.0.0.1", port, "someone-else")
    children.append(child)
    desired = Desired(roles=(managed("coder", port),))
    obs = observe(desired, Remembered(roles=(record("coder", port, child),)), probe_timeout=0.2)
    role = obs.role("coder")
    assert role.process is not None and not role.process.owned
    assert role.port_taken is True


def test_exposed_lists_non_loopback_listeners(children: list[Child]) -> None:
    """Our process listening on 0.0.0.0 is exposed; the port is still ours, not taken."""
    port = free_port()
    child = Child("0.0.0.0", port, "coder-0000abcd")
    children.append(child)
    desired = Desired(roles=(managed("coder", port),))
    obs = observe(desired, Remembered(roles=(record("coder", port, child),)), probe_timeout=0.2)
    role = obs.role("coder")
    assert role.exposed == (f"0.0.0.0:{port}",)
    assert role.port_taken is False


def test_unrecorded_marked_process_is_not_claimed_by_the_observer(children: list[Child]) -> None:
    """Ownership comes from the store only: an unrecorded marked listener reads as port_taken.

    (Re-adopting our own unrecorded servers is the loop's job, with stricter
    checks than a marker: see loop.readoptable and the e2e tests.)
    """
    port = free_port()
    child = Child("127.0.0.1", port, "coder-0000abcd")
    children.append(child)
    desired = Desired(roles=(managed("coder", port),))
    obs = observe(desired, Remembered(roles=(record("coder", port),)), probe_timeout=0.2)
    role = obs.role("coder")
    assert role.process is None
    assert role.port_taken is True


def test_foreign_listener_takes_a_managed_port() -> None:
    """Something not ours accepting on a managed role's port → port_taken; adopted → never."""
    with Scripted({}) as foreign:
        desired = Desired(roles=(
            managed("coder", foreign.port),
            RoleSpec(name="seen", runtime=Runtime.LLAMACPP, mode=Mode.ADOPTED,
                     serve=ServeSpec(port=foreign.port)),
        ))
        obs = observe(desired, Remembered(), probe_timeout=0.5)
    assert obs.role("coder").port_taken is True
    assert obs.role("seen").port_taken is False


def test_free_port_is_not_taken() -> None:
    """The twin: nothing listening → port_taken False, probe unreachable."""
    obs = observe(Desired(roles=(managed("coder", free_port()),)), Remembered(), probe_timeout=0.5)
    assert obs.role("coder").port_taken is False
    assert obs.role("coder").probe.health is Health.UNREACHABLE


def test_roles_are_probed_concurrently() -> None:
    """Two silent servers with a 0.5 s timeout take ~0.5 s together, not 1 s."""
    with Silent() as a, Silent() as b:
        desired = Desired(roles=(
            RoleSpec(name="a", runtime=Runtime.LLAMACPP, mode=Mode.ADOPTED, serve=ServeSpec(port=a.port)),
            RoleSpec(name="b", runtime=Runtime.MLX_LM, mode=Mode.ADOPTED, serve=ServeSpec(port=b.port)),
        ))
        started = time.monotonic()
        obs = observe(desired, Remembered(), probe_timeout=0.5)
        took = time.monotonic() - started
    assert [r.probe.health for r in obs.roles] == [Health.UNREACHABLE, Health.UNREACHABLE]
    assert took < 0.9


# ---------------------------------------------------------------- mlx-lm readiness


MLX_ROUTES = {"/health": (200, {"status": "ok"}), "/v1/completions": (200, {"choices": [{}]})}


def test_mlx_readiness_post_only_after_a_start(children: list[Child]) -> None:
    """Started, not yet healthy → one POST completion without model; after healthy → GET only."""
    ours = Child("127.0.0.1", free_port(), "voice-0000abcd")  # the recorded, owned process
    children.append(ours)
    with Scripted(MLX_ROUTES) as server:
        spec = managed("voice", server.port, runtime=Runtime.MLX_LM)
        argv = ("/bin/mlx_lm.server", "--model", "/m/tiny-mlx", "--port", str(server.port))
        fresh = record("voice", server.port, ours, runtime=Runtime.MLX_LM, started_at=1.0,
                       launch_argv=argv)
        obs = observe(Desired(roles=(spec,)), Remembered(roles=(fresh,)), probe_timeout=1)
        assert server.paths()[-2:] == [("GET", "/health"), ("POST", "/v1/completions")]
        assert server.requests[-1][2] == {"prompt": "hi", "max_tokens": 1}
        assert obs.role("voice").probe.identity == "/m/tiny-mlx"
        server.requests.clear()
        healthy = record("voice", server.port, ours, runtime=Runtime.MLX_LM, started_at=1.0,
                         healthy_since=2.0)
        observe(Desired(roles=(spec,)), Remembered(roles=(healthy,)), probe_timeout=1)
        assert server.paths() == [("GET", "/health")]


def test_an_mlx_server_running_a_program_is_asked_its_version_by_its_process(
        children: list[Child]) -> None:
    """§14 mlx-lm answers no version over HTTP: the observer reads it from our running
    process (``world/pkgversion``), only for a role that runs a Program. A process that
    maps no mlx package reads ``unknown`` (not confirmed); an unpinned role, nothing."""
    ours = Child("127.0.0.1", free_port(), "voice-0000abcd")
    children.append(ours)
    with Scripted(MLX_ROUTES) as server:
        healthy = record("voice", server.port, ours, runtime=Runtime.MLX_LM, started_at=1.0,
                         healthy_since=2.0)
        mlx = ProgramSpec(name="mlx-0.26", runtime=Runtime.MLX_LM, version="0.26.3",
                          entrypoint="bin/mlx_lm.server", root="/p",
                          files=(ModelFile(path="bin/mlx_lm.server", sha256="a" * 64, size=1),))
        pinned = managed("voice", server.port, runtime=Runtime.MLX_LM, program="mlx-0.26")
        obs = observe(Desired(roles=(pinned,), programs=(mlx,)), Remembered(roles=(healthy,)),
                      probe_timeout=1)
        assert obs.role("voice").probe.health is Health.UP
        assert obs.role("voice").probe.version == "unknown"
        plain = managed("voice", server.port, runtime=Runtime.MLX_LM)
        obs = observe(Desired(roles=(plain,)), Remembered(roles=(healthy,)), probe_timeout=1)
        assert obs.role("voice").probe.version is None


def test_mlx_readiness_post_never_reaches_a_port_our_process_left() -> None:
    """Our server died before it first answered: whatever listens there now gets only GETs."""
    with Scripted(MLX_ROUTES) as stranger:
        spec = managed("voice", stranger.port, runtime=Runtime.MLX_LM)
        dead = attrs.evolve(record("voice", stranger.port, runtime=Runtime.MLX_LM,
                                   started_at=1.0),
                            process=ServerProcess(pid=999_999, create_time=1.0))
        observe(Desired(roles=(spec,)), Remembered(roles=(dead,)), probe_timeout=1)
        assert {m for m, _ in stranger.paths()} == {"GET"}


def test_adopted_roles_receive_only_gets() -> None:
    """Adopted llama.cpp and mlx-lm roles only ever receive GETs."""
    routes = dict(MLX_ROUTES, **{"/v1/models": (200, {"data": []}), "/props": (200, {})})
    with Scripted(routes) as a, Scripted(routes) as b:
        desired = Desired(roles=(
            RoleSpec(name="a", runtime=Runtime.LLAMACPP, mode=Mode.ADOPTED, serve=ServeSpec(port=a.port)),
            RoleSpec(name="b", runtime=Runtime.MLX_LM, mode=Mode.ADOPTED, serve=ServeSpec(port=b.port)),
        ))
        remembered = Remembered(roles=(
            flat_record(name="b", instance_id="b-1", runtime=Runtime.MLX_LM, mode=Mode.ADOPTED,
                       port=b.port, started_at=1.0),
        ))
        observe(desired, remembered, probe_timeout=1)
        methods = {m for m, _ in a.paths() + b.paths()}
    assert methods == {"GET"}


# ---------------------------------------------------------------- Ollama


def ollama_world(port: int, *tags: str) -> Desired:
    models = tuple(
        ModelSpec(name=f"m{i}", format=ModelFormat.OLLAMA, source=ModelSourceInfo(ollama_tag=t))
        for i, t in enumerate(tags)
    )
    roles = tuple(
        RoleSpec(name=f"r{i}", runtime=Runtime.OLLAMA, mode=Mode.MANAGED, model=f"m{i}",
                 serve=ServeSpec(port=port))
        for i in range(len(tags))
    )
    return Desired(roles=roles, models=models)


def test_ollama_roles_on_one_endpoint_share_one_set_of_probes() -> None:
    """Two roles on one Ollama: one /api/version, /api/tags and /api/ps per pass; GETs only."""
    with OllamaDouble(pulled=["llama3.2", "qwen3:8b"]) as o:
        client_load(o.port, "qwen3:8b")
        o.clear_requests()
        obs = observe(ollama_world(o.port, "llama3.2", "qwen3:8b"), Remembered(), probe_timeout=2)
        requests = [(m, p) for m, p, _ in o.requests]
    assert sorted(requests) == [("GET", "/api/ps"), ("GET", "/api/tags"), ("GET", "/api/version")]
    r0, r1 = obs.role("r0").probe, obs.role("r1").probe
    assert r0.health is Health.UP and r0.identity is None
    assert r1.identity == "qwen3:8b" and r1.resident_models == ("qwen3:8b",)
    assert set(r0.listed_models) == {"llama3.2:latest", "qwen3:8b"}


def test_ollama_ps_blocking_during_a_load_reads_loading() -> None:
    """While a load is in flight /api/ps blocks; past the short timeout that is LOADING."""
    with OllamaDouble(pulled=["llama3.2"], load_seconds=3.0) as o:
        loader = threading.Thread(target=client_load, args=(o.port, "llama3.2"), daemon=True)
        loader.start()
        deadline = time.monotonic() + 5
        while not o.loading() and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        obs = observe(ollama_world(o.port, "llama3.2"), Remembered(), probe_timeout=2)
        took = time.monotonic() - started
        o.set_load_seconds(0)
        o.stop()  # ends the in-flight load at once
        loader.join(timeout=5)
    probe = obs.role("r0").probe
    assert probe.health is Health.LOADING and probe.detail.startswith("loading model")
    assert took < 1.8  # the ps timeout is short, not the 2 s probe timeout


def test_ollama_evicted_model_is_no_longer_resident() -> None:
    """A model evicted behind our back disappears from resident_models."""
    with OllamaDouble(pulled=["llama3.2"]) as o:
        client_load(o.port, "llama3.2")
        before = observe(ollama_world(o.port, "llama3.2"), Remembered(), probe_timeout=2)
        o.evict("llama3.2")
        after = observe(ollama_world(o.port, "llama3.2"), Remembered(), probe_timeout=2)
    assert before.role("r0").probe.identity == "llama3.2:latest"
    assert after.role("r0").probe.identity is None
    assert after.role("r0").probe.detail == "llama3.2 is pulled, not resident"


def client_load(port: int, tag: str) -> None:
    """Load a model the way another Ollama client would (not through the reconciler)."""
    from reconciler.world import probe
    from reconciler.runtimes import ollama

    probe.send_sync("127.0.0.1", port, ollama.load_request(tag, 300), timeout=10)


# ---------------------------------------------------------------- settled: identity from the launch


def _settled(spec: RoleSpec | None, rec: RoleRecord, process: ProcessFacts | None) -> bool:
    desired = Desired(roles=(spec,) if spec is not None else ())
    t = target(rec.name, desired, Remembered(roles=(rec,)))
    return with_process(t, process).ctx.settled


def test_only_our_own_server_healthy_since_its_creation_is_settled() -> None:
    """Settled needs: managed, desired, ours and alive on its port, healthy since created."""
    spec = managed("coder", 8080)
    rec = record("coder", 8080, healthy_since=1000.0, launch_argv=("/p", "--alias", "coder"))
    rec = attrs.evolve(rec, process=ServerProcess(pid=42, create_time=900.0))
    ours = ProcessFacts(pid=42, create_time=900.0, alive=True, owned=True,
                        listen=("127.0.0.1:8080",))
    assert _settled(spec, rec, ours)
    assert not _settled(attrs.evolve(spec, mode=Mode.ADOPTED),
                        attrs.evolve(rec, mode=Mode.ADOPTED), ours)  # foreign: always asked
    assert not _settled(None, rec, ours)  # removed role
    assert not _settled(spec, rec, attrs.evolve(ours, owned=False))  # not ours
    assert not _settled(spec, rec, attrs.evolve(ours, alive=False))
    assert not _settled(spec, rec, None)
    assert not _settled(spec, rec, attrs.evolve(ours, listen=("127.0.0.1:9090",)))
    assert not _settled(spec, attrs.evolve(rec, healthy_since=None), ours)  # not answered yet
    # healthy before this process was created: that was its predecessor
    assert not _settled(spec, attrs.evolve(rec, healthy_since=899.0), ours)
    assert not _settled(spec, attrs.evolve(rec, launch_argv=()), ours)


def test_settled_llamacpp_gets_only_health() -> None:
    """observe(): our settled llama.cpp server is asked GET /health only; adopted ones in full."""
    up = {"/health": (200, {"status": "ok"}), "/v1/models": (200, {"data": [{"id": "coder"}]}),
          "/props": (200, {"model_path": "/m/c.gguf"})}
    with Scripted(up) as server:
        spec = managed("coder", server.port)
        ours = ProcessFacts(pid=1, create_time=1.0, alive=True, owned=True,
                            listen=(f"127.0.0.1:{server.port}",))
        rec = attrs.evolve(record("coder", server.port),
                           process=ServerProcess(pid=1, create_time=1.0), healthy_since=2.0,
                           launch_argv=("/p", "--model", "/m/c.gguf", "--alias", "coder"))
        t = with_process(target("coder", Desired(roles=(spec,)), Remembered(roles=(rec,))), ours)
        facts = probe_all([t], 1.0)["coder"]
        adopted = attrs.evolve(spec, mode=Mode.ADOPTED)
        observe(Desired(roles=(adopted,)), Remembered(), probe_timeout=1.0)
        paths = [path for _, path, *_ in server.requests]
    assert facts.health is Health.UP and facts.identity == "/m/c.gguf"
    assert facts.detail == "healthy; serving coder"
    assert paths[:2] == ["/health", "/health"]  # ours: /health only; then the adopted one
    assert sorted(paths[2:]) == ["/props", "/v1/models"]  # asked together


# ---------------------------------------------------------------- hung, not gone (§4, §4.1)


def test_a_hung_adopted_server_is_taken_not_free_and_planned_unknown() -> None:
    """Accepts, never answers: timed out and port_taken, so the plan says unknown, not exited."""
    from reconciler.core.decisions import PlanContext, Status
    from reconciler.planner.plan import plan

    with Silent() as hung:
        desired = Desired(roles=(
            RoleSpec(name="hung", runtime=Runtime.LLAMACPP, mode=Mode.ADOPTED,
                     serve=ServeSpec(port=hung.port)),
            RoleSpec(name="gone", runtime=Runtime.LLAMACPP, mode=Mode.ADOPTED,
                     serve=ServeSpec(port=free_port())),
        ))
        obs = observe(desired, Remembered(), probe_timeout=0.3)
    assert obs.role("hung").probe.timed_out and obs.role("hung").port_taken
    assert not obs.role("gone").probe.timed_out and not obs.role("gone").port_taken
    the_plan = plan(desired, obs, Remembered(), PlanContext(), 1000.0)
    assert the_plan.decision("hung").status is Status.UNKNOWN
    assert the_plan.decision("gone").status is Status.EXITED


def test_a_role_with_liveness_is_asked_within_its_own_timeout() -> None:
    """liveness.timeout, not the node's probe timeout, bounds the role's requests."""
    from reconciler.core.desired import LivenessSpec

    with Silent() as hung:
        spec = RoleSpec(name="hung", runtime=Runtime.LLAMACPP, mode=Mode.ADOPTED,
                        serve=ServeSpec(port=hung.port),
                        liveness=LivenessSpec(period=1.0, timeout=0.2, failures=2, grace=0.0))
        started = time.monotonic()
        obs = observe(Desired(roles=(spec,)), Remembered(), probe_timeout=5.0)
        took = time.monotonic() - started
    assert obs.role("hung").probe.timed_out
    assert obs.role("hung").probe.detail == "no answer to GET /health within 0.2s"
    assert took < 2.0
