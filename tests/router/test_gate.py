"""§9 a stop never cuts a request: the router's gate, as a state machine and in one process.

``GateMachine`` drives the router's ``Book`` the way the proxy and the
daemon do — requests enter and finish, passes close a role, drain it, stop
its server and publish routes (a pass's routes may reach the router's loop
late, after the next pass closed the role) — and checks after every step that
no request was ever forwarded to a server we stopped, and that no server was
stopped with a request of ours in flight. The in-process tests run the real
``Proxy``: a request in flight holds the stop back, a request that arrives
meanwhile waits and is served after; ``max_concurrency`` is never exceeded;
a client's token usage is counted under its key's name.
"""

from __future__ import annotations

from reconciler.core.decisions import flat

import asyncio
import threading

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from prometheus_client import CollectorRegistry

from reconciler.report.metrics import RouterMetrics
from reconciler.router import clients
from reconciler.router.queues import GO, Book
from reconciler.router.rules import Route, RouteState, Table
from tests.router.test_proxy import _route, run


def _table(state: RouteState) -> Table:
    return Table(routes=(Route(role="r", names=("r",), host="127.0.0.1", port=1, state=state),))


class GateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.book = Book(lambda: None)
        self.table = _table(RouteState.READY)  # what the proxy routes on now
        self.up = True  # the server runs
        self.generation = 0  # which server: a new one after each start
        self.flying: list[int] = []  # the generation each request in flight was sent to
        self.passes = 0
        self.closing: int | None = None  # the pass that closed the route, until it publishes
        self.cut = 0  # requests in flight at a stop of ours
        self.sent_to_stopped = 0

    @rule()
    def a_request_arrives(self) -> None:
        route = self.table.get("r")
        if route.state is RouteState.READY and self.book.enter("r", None) == GO:
            if not self.up:
                self.sent_to_stopped += 1
            self.flying.append(self.generation)

    @precondition(lambda self: self.flying)
    @rule(data=st.data())
    def a_request_finishes(self, data) -> None:
        self.flying.pop(data.draw(st.integers(0, len(self.flying) - 1)))
        self.book.finished("r")

    @precondition(lambda self: self.up and self.closing is None)
    @rule()
    def a_pass_decides_a_stop(self) -> None:
        self.passes += 1
        self.closing = self.passes
        self.book.close("r", self.passes)

    @precondition(lambda self: self.closing is not None and self.up)
    @rule()
    def the_drain_ends_and_the_stop_goes(self) -> None:
        if self.book.drain("r", 0.0):
            return  # still in flight: the daemon keeps waiting (drain_timeout)
        self.cut += len([g for g in self.flying if g == self.generation])
        self.up = False

    @precondition(lambda self: self.closing is not None)
    @rule()
    def an_older_pass_routes_arrive_late(self) -> None:
        self.table = _table(RouteState.READY)
        self.book.publish(self.table, 0, self.closing - 1)

    @precondition(lambda self: self.closing is not None and not self.up)
    @rule()
    def the_stopping_pass_publishes(self) -> None:
        self.table = _table(RouteState.WAIT)
        self.book.publish(self.table, 0, self.closing)
        self.closing = None

    @precondition(lambda self: not self.up and self.closing is None)
    @rule()
    def a_pass_starts_it_again(self) -> None:
        self.passes += 1
        self.up, self.generation = True, self.generation + 1
        self.table = _table(RouteState.READY)
        self.book.publish(self.table, 0, self.passes)

    @invariant()
    def no_request_is_cut_or_sent_to_a_stopped_server(self) -> None:
        assert self.cut == 0 and self.sent_to_stopped == 0


TestGate = GateMachine.TestCase
TestGate.settings = settings(max_examples=300, stateful_step_count=25, deadline=None)


def test_a_request_in_flight_holds_the_stop_and_one_arriving_meanwhile_waits() -> None:
    """The daemon's thread closes and drains while a stream is in flight: the drain ends
    only when the stream does, and a request sent meanwhile reaches no server until the
    pass's routes open the role again."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        stream = asyncio.ensure_future(rig.post(s, {"model": "chat", "stream": True,
                                                    "hold": True}))
        while rig.book.snapshot()[0].of("chat").in_flight == 0:
            await asyncio.sleep(0.01)
        drained = []
        daemon = threading.Thread(target=lambda: (rig.book.close("chat", 1),
                                                  drained.append(rig.book.drain("chat", 10))))
        daemon.start()
        await asyncio.sleep(0.1)
        late = asyncio.ensure_future(rig.post(s, {"model": "chat"}))
        await asyncio.sleep(0.2)
        assert not drained and len(rig.upstream.seen) == 1 and not late.done()
        rig.upstream.go_on.set()
        status, _, raw = await stream
        assert status == 200 and raw.endswith(b"data: second\n\n")  # whole, never cut
        await asyncio.get_running_loop().run_in_executor(None, daemon.join)
        assert drained == [0] and len(rig.upstream.seen) == 1 and not late.done()
        table = Table(routes=(_route(RouteState.READY, rig.upstream.port),))
        rig.proxy.table = table
        rig.book.publish(table, 10**9, 1)  # the pass's routes: the role is back
        assert (await late)[0] == 200 and len(rig.upstream.seen) == 2
    run(test)


def test_max_concurrency_holds_the_rest_in_the_queue() -> None:
    """§9 ``max_concurrency``: no more requests than that are in flight at a role's server; the rest
    wait in the queue and are served after."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port, max_concurrency=1))
        peak = []

        async def watch():
            while True:
                peak.append(rig.book.snapshot()[0].of("chat").in_flight)
                await asyncio.sleep(0.005)

        watcher = asyncio.ensure_future(watch())
        held = [asyncio.ensure_future(rig.post(s, {"model": "chat", "stream": True,
                                                   "hold": True})) for _ in range(4)]
        await asyncio.sleep(0.3)
        assert len(rig.upstream.seen) == 1
        assert rig.book.snapshot()[0].of("chat").queued == 3
        rig.upstream.go_on.set()
        answers = await asyncio.gather(*held)
        watcher.cancel()
        assert [a[0] for a in answers] == [200] * 4 and len(rig.upstream.seen) == 4
        assert max(peak) == 1
    run(test)


def test_usage_of_an_answer_and_of_a_stream_is_counted_per_key() -> None:
    """§9 token usage of a plain answer and of a stream is counted per client key (``api_keys_file``
    names)."""
    registry = CollectorRegistry()
    metrics = RouterMetrics(registry, node="n")

    async def test(rig, s):
        rig.proxy.metrics = metrics
        rig.proxy._keys = clients.parse_keys(  # noqa: SLF001
            f"alice:{clients.digest('ka')}\nbob:{clients.digest('kb')}\n")
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        for key, n in (("ka", 2), ("kb", 1)):
            for _ in range(n):
                status, _, raw = await rig.post(s, {"model": "chat", "usage": [3, 5]},
                                                headers={"Authorization": f"Bearer {key}"})
                assert status == 200, raw
        status, _, _ = await rig.post(s, {"model": "chat"}, headers={"Authorization": "Bearer x"})
        assert status == 401
    run(test)
    get = registry.get_sample_value
    assert get("reconciler_router_client_requests_total",
               {"node": "n", "role": "chat", "key": "alice"}) == 2
    assert get("reconciler_router_tokens_total",
               {"node": "n", "role": "chat", "key": "alice", "kind": "completion"}) == 10
    assert get("reconciler_router_tokens_total",
               {"node": "n", "role": "chat", "key": "bob", "kind": "prompt"}) == 3


def test_usage_is_read_from_an_answers_tail() -> None:
    """§9 usage is read from an answer's tail in every shape servers send it (OpenAI, llama.cpp,
    Ollama); none when absent."""
    stream = (b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
              b'data: {"choices":[],"usage":{"completion_tokens":4,"prompt_tokens":9,'
              b'"total_tokens":13}}\n\ndata: [DONE]\n\n')
    assert clients.usage(stream) == (9, 4)
    assert clients.usage(b'{"usage": {"prompt_tokens": 2, "completion_tokens": 1}, '
                         b'"timings": {"a": 1}}') == (2, 1)
    assert clients.usage(b'"usage":{"completion_tokens":2,"prompt_tokens":5,"total_tokens":7,'
                         b'"prompt_tokens_details":{"cached_tokens":0}},"timings":{}') == (5, 2)
    assert clients.usage(b'{"done":true,"prompt_eval_count":7,"eval_count":3}') == (7, 3)
    assert clients.usage(b"data: [DONE]\n\n") is None


def test_api_keys_file_lines() -> None:
    """§9 ``api_keys_file``: ``NAME:SHA256`` lines (comments, blanks skipped) name a key's client; a
    malformed line is refused naming the file."""
    keys = clients.parse_keys(f"# clients\nalice:{clients.digest('ka')}\n\n")
    assert clients.client_of("ka", keys) == "alice" and clients.client_of("kb", keys) is None
    for bad in ("alice", "alice:1234", f"al ice:{clients.digest('x')}", ""):
        try:
            clients.parse_keys(bad, "keys")
        except ValueError as exc:
            assert str(exc).startswith("keys")
        else:
            raise AssertionError(bad)


def test_the_routers_gate_calls_off_an_idle_stop_and_bounds_an_eviction() -> None:
    """``Router.before_stop``: an idle stop with a request in flight is called off (the route
    reopens at once); an eviction waits drain_timeout, then goes ahead and counts the cut."""
    import time

    from reconciler.core.decisions import Decision, Reason, Status, Verb
    from reconciler.core.desired import RouterConfig
    from reconciler.router.service import Router

    registry = CollectorRegistry()
    router = Router(RouterConfig(drain_timeout=0.3), wake=lambda: None,
                    metrics=RouterMetrics(registry, node="n"))
    try:
        router._proxy.table = Table(routes=(_route(RouteState.READY, 1),))  # noqa: SLF001
        assert router.book.enter("chat", None) == GO
        stop = dict(role="chat", verb=Verb.STOP, status=Status.RUNNING, pid=7, create_time=1.0)
        why = router.before_stop(flat(reason=Reason.IDLE, **stop))
        assert why is not None and "in flight" in why
        assert router.book.enter("chat", None) == GO  # reopened: the role is not idle
        router.book.finished("chat")
        began = time.monotonic()
        assert router.before_stop(flat(reason=Reason.EVICTED, why="for x", **stop)) is None
        assert 0.25 <= time.monotonic() - began < 2
        assert registry.get_sample_value("reconciler_router_cut_requests_total",
                                         {"node": "n", "role": "chat"}) == 1
        assert router.book.enter("chat", None) != GO  # closed until the pass's routes
        router.book.finished("chat")
        assert router.before_stop(flat(reason=Reason.EVICTED, why="for x", **stop)) is None
        assert router.before_stop(flat(role="other", verb=Verb.STOP, pid=4242, create_time=1.0, reason=Reason.IDLE,
                                           status=Status.RUNNING)) is None  # not routed
    finally:
        router._loop.close()  # noqa: SLF001  (never started)


def test_a_bearer_keys_whole_digest_must_match() -> None:
    """§9 api_keys_file: a key is a client's only when its SHA-256 is the stored digest in
    all 64 digits: one that differs in the last digit, or in the first, names nobody."""
    known = clients.digest("ka")
    for other in (known[:-1] + ("0" if known[-1] != "0" else "1"),
                  ("0" if known[0] != "0" else "1") + known[1:]):
        assert clients.client_of("ka", {other: "alice"}) is None
    assert clients.client_of("ka", {known: "alice"}) == "alice"


def test_idle_after_counts_from_the_end_of_the_last_request_not_its_start() -> None:
    """§9 a request that arrived at t=100 and ended at t=700 was in use until 700: the
    demand says its last request at 700, so idle_after runs from its end."""
    now = [100.0]
    book = Book(lambda: None, clock=lambda: now[0])
    book.arrived("chat")
    assert book.enter("chat", None) == GO
    now[0] = 700.0
    book.finished("chat")
    assert book.snapshot()[0].of("chat").last_request == 700.0
