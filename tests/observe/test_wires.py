"""probe.Wires: many requests on one selector — concurrent, each within its own time, and
exchanges that move on independently of each other."""

from __future__ import annotations

import time

from reconciler.runtimes.common import ErrorKind, ProbeRequest
from reconciler.world import probe
from tests.observe.servers import Scripted, Silent, free_port


def _slow(seconds: float):  # type: ignore[no-untyped-def]
    def reply(method, body):  # type: ignore[no-untyped-def]
        time.sleep(seconds)
        return (200, {"ok": True})
    return reply


def test_requests_on_one_selector_run_concurrently() -> None:
    """Ten answers that each take 0.3 s arrive together, not one after the other."""
    got = []
    with Scripted({"/slow": _slow(0.3)}) as server:
        wires = probe.Wires()
        started = time.monotonic()
        for _ in range(10):
            wires.ask("127.0.0.1", server.port, ProbeRequest(method="GET", path="/slow"),
                      timeout=5, then=got.append)
        wires.run()
        took = time.monotonic() - started
        wires.close()
    assert [a.status for a in got] == [200] * 10
    assert took < 2.0, took  # one after the other: 3 s


def test_each_request_has_its_own_time() -> None:
    """A silent server times out at its own deadline; a refusal and an answer alongside are
    unaffected, and the run ends when the last one is over."""
    got: dict[str, object] = {}
    with Silent() as silent, Scripted({"/x": (200, {"ok": True})}) as server:
        wires = probe.Wires()
        started = time.monotonic()
        wires.ask("127.0.0.1", silent.port, ProbeRequest(method="GET", path="/x"), timeout=0.5,
                  then=lambda a: got.setdefault("silent", (a, time.monotonic() - started)))
        wires.ask("127.0.0.1", free_port(), ProbeRequest(method="GET", path="/x"), timeout=5,
                  then=lambda a: got.setdefault("refused", (a, time.monotonic() - started)))
        wires.ask("127.0.0.1", server.port, ProbeRequest(method="GET", path="/x"), timeout=5,
                  then=lambda a: got.setdefault("up", (a, time.monotonic() - started)))
        wires.run()
        wires.close()
    silent_answer, silent_at = got["silent"]  # type: ignore[misc]
    assert silent_answer.error is ErrorKind.TIMEOUT and silent_answer.error_detail == "within 0.5s"
    assert 0.45 <= silent_at < 2.0, silent_at
    assert got["refused"][0].error is ErrorKind.REFUSED  # type: ignore[index]
    assert got["up"][0].status == 200 and got["up"][1] < silent_at  # type: ignore[index]


def _two_steps(first: ProbeRequest, second: ProbeRequest):  # type: ignore[no-untyped-def]
    answers = yield (first,)
    more = yield (second,)
    return {"first": answers[0], "second": more[0]}


def test_exchanges_on_one_selector_move_on_independently() -> None:
    """An exchange waiting on a hung server does not hold back another one's next batch."""
    done: dict[str, float] = {}
    results: dict[str, dict] = {}
    x, y = ProbeRequest(method="GET", path="/x"), ProbeRequest(method="GET", path="/y")
    with Silent() as silent, Scripted({"/x": (200, {"a": 1}), "/y": (200, {"b": 2})}) as server:
        wires = probe.Wires()
        started = time.monotonic()

        def on(port: int, timeout: float):  # type: ignore[no-untyped-def]
            return lambda r, then: wires.ask("127.0.0.1", port, r, timeout=timeout, then=then)

        def finished(name: str):  # type: ignore[no-untyped-def]
            def then(result: dict) -> None:
                results[name] = result
                done[name] = time.monotonic() - started
            return then

        probe.exchange(wires, _two_steps(x, y), on(silent.port, 1.0), None, finished("hung"))
        probe.exchange(wires, _two_steps(x, y), on(server.port, 5.0), None, finished("up"))
        wires.run()
        wires.close()
    assert results["up"]["first"].body == {"a": 1} and results["up"]["second"].body == {"b": 2}
    assert done["up"] < 0.5 < done["hung"], done
    assert results["hung"]["first"].error is ErrorKind.TIMEOUT
    assert results["hung"]["second"].error is ErrorKind.TIMEOUT  # its second batch went out too


def test_a_known_batch_is_not_sent_again() -> None:
    """``known`` answers a batch whose every request it holds; only the rest is sent."""
    x, y = ProbeRequest(method="GET", path="/x"), ProbeRequest(method="GET", path="/y")
    known = {x: probe.ProbeAnswer(status=200, body={"known": True})}
    results = []
    with Scripted({"/x": (200, {"a": 1}), "/y": (200, {"b": 2})}) as server:
        wires = probe.Wires()
        probe.exchange(wires, _two_steps(x, y),
                       lambda r, then: wires.ask("127.0.0.1", server.port, r, timeout=5,
                                                 then=then), known, results.append)
        wires.run()
        wires.close()
        paths = server.paths()
    assert results[0]["first"].body == {"known": True} and results[0]["second"].body == {"b": 2}
    assert paths == [("GET", "/y")]


def test_an_address_that_is_no_ip_is_an_answer_not_an_exception() -> None:
    """§5 a probe to a host name (not an address) is a transport-error answer, never a DNS lookup
    nor an exception."""
    got = []
    wires = probe.Wires()
    wires.ask("localhost", 80, ProbeRequest(method="GET", path="/x"), timeout=1, then=got.append)
    wires.run()
    wires.close()
    assert got[0].error is ErrorKind.TRANSPORT and "does not appear to be an IPv4" in got[0].error_detail


def test_a_failure_beside_the_probes_reaches_observes_caller(monkeypatch) -> None:
    """The process table is read in a thread beside the probes; its failure is observe()'s,
    raised after the probes it overlapped ended (as the awaited thread's was)."""
    import pytest

    from reconciler.core.desired import (
        Desired, Mode, NodeConfig, PortRange, RoleSpec, Runtime, ServeSpec)
    from reconciler.core.observed import Remembered
    from reconciler.world import observe as observing

    def broken(*args):  # type: ignore[no-untyped-def]
        raise RuntimeError("the process table could not be read")

    monkeypatch.setattr(observing, "process_side", broken)
    with Scripted({"/health": (200, {"status": "ok"})}) as server:
        desired = Desired(
            roles=(RoleSpec(name="r", runtime=Runtime.LLAMACPP, mode=Mode.ADOPTED, serve=ServeSpec(port=server.port)),),
            node=NodeConfig(allowed_ports=PortRange(start=server.port, end=server.port)))
        with pytest.raises(RuntimeError, match="could not be read"):
            observing.observe(desired, Remembered(), probe_timeout=2)
        assert ("GET", "/health") in server.paths()


def test_what_a_callback_raises_is_raised_not_made_an_answer() -> None:
    """A fault in the code fed the answers (an exchange's reader) takes the run down loudly,
    whether the answer came at once (a refusal) or from the selector."""
    import pytest

    def broken(answer):  # type: ignore[no-untyped-def]
        raise LookupError("reader bug")

    wires = probe.Wires()
    with pytest.raises(LookupError):  # no address: answered at once
        wires.ask("localhost", 80, ProbeRequest(method="GET", path="/x"), timeout=1, then=broken)
    with Silent() as silent, Scripted({"/x": (200, {"ok": True})}) as server:
        wires.ask("127.0.0.1", silent.port, ProbeRequest(method="GET", path="/x"), timeout=5,
                  then=lambda answer: None)
        wires.ask("127.0.0.1", server.port, ProbeRequest(method="GET", path="/x"), timeout=5,
                  then=broken)
        with pytest.raises(LookupError):
            wires.run()
        wires.close()  # the silent server's socket, still in flight, is closed with it
        assert wires.live == 0
