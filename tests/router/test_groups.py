"""A group of instances behind one name, through the real proxy (BEHAVIOUR §9.1).

A real ``Proxy`` and ``Book`` on loopback, a routing table of one group set by hand (as
``Router._apply`` does after a pass: ``known_ready`` then ``publish``), and as its
instances ``SlotServer``s (tests/support/slotserver.py: llama-server's slots, /props,
/health; a kill that resets every connection). What is asserted is what the clients got
and what each server was sent.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import attrs
from prometheus_client import CollectorRegistry

from reconciler.core.desired import RouterConfig
from reconciler.report.metrics import RouterMetrics
from reconciler.router.proxy import Proxy
from reconciler.router.queues import Book
from reconciler.router.rules import Route, RouteState, Table
from tests.support.slotserver import SlotServer


def instance(i: int, port: int, state: RouteState = RouteState.READY, **kw) -> Route:
    name = "chat" if i == 0 else f"chat/{i}"
    return Route(role=name, names=(name, "chat", "qwen"), host="127.0.0.1", port=port,
                 state=state, status="running" if state is RouteState.READY else "starting",
                 upstream_model="served", group="chat", replica=i, **kw)


class Group:
    def __init__(self, config: RouterConfig, servers: list[SlotServer]) -> None:
        self.wakes = 0
        self.book = Book(self._wake)
        self.registry = CollectorRegistry()
        self.metrics = RouterMetrics(self.registry, "n")
        self.proxy = Proxy(config, self.book, metrics=self.metrics)
        self.servers = servers
        self.url = ""

    def _wake(self) -> None:
        self.wakes += 1

    def publish(self, *routes: Route, seq: int = 10**9) -> None:
        self.proxy.table = self.proxy.known_ready(Table(routes=routes))
        self.book.publish(self.proxy.table, seq)

    def all_ready(self) -> None:
        self.publish(*(instance(i, s.port) for i, s in enumerate(self.servers)))

    async def learned(self) -> None:
        """Wait until every instance's slots are read from /props."""
        for _ in range(200):
            if all(self.proxy._slots.get(r.role) for r in self.proxy.table.routes):  # noqa: SLF001
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"slots not learned: {self.proxy._slots}")  # noqa: SLF001

    async def post(self, session, model="chat", tokens=1, stream=False):
        body = {"model": model, "max_tokens": tokens, "stream": stream,
                "messages": [{"role": "user", "content": "hi"}]}
        async with session.post(self.url + "/v1/chat/completions",
                                data=json.dumps(body).encode()) as r:
            return r.status, await r.read()

    def value(self, name: str, role: str) -> float:
        return self.registry.get_sample_value(name, {"node": "n", "role": role}) or 0.0


def run(test, *, slots=(2, 2, 2), per_token=0.01, **config) -> None:
    async def main():
        servers = [SlotServer(slots=n, per_token=per_token) for n in slots]
        for s in servers:
            await s.start()
        group = Group(RouterConfig(host="127.0.0.1", port=0, **config), servers)
        host, port = await group.proxy.start()
        group.url = f"http://{host}:{port}"
        try:
            async with aiohttp.ClientSession() as session:
                await test(group, session)
        finally:
            group.book.fail_all("closing")
            await group.proxy.close()
            for s in servers:
                await s.close()
    asyncio.run(main())


def test_a_group_name_spreads_requests_over_its_instances_within_their_slots() -> None:
    """§9.1 requests naming the group go to its instances, the least loaded first: 6 at once
    over 3 instances of 2 slots is 2 each, none over its slots."""
    async def test(g: Group, session):
        g.all_ready()
        await g.learned()
        got = await asyncio.gather(*(g.post(session, tokens=20) for _ in range(6)))
        assert [s for s, _ in got] == [200] * 6
        assert [s.sent for s in g.servers] == [2, 2, 2]
        assert all(s.most_inside <= 2 for s in g.servers)
    run(test)


def test_an_alias_reaches_the_group_and_an_instance_name_only_that_instance() -> None:
    """§9.1 the Model's name reaches the group; ``chat/1`` reaches instance 1 alone."""
    async def test(g: Group, session):
        g.all_ready()
        await g.learned()
        for _ in range(4):
            assert (await g.post(session, model="chat/1"))[0] == 200
        assert [s.sent for s in g.servers] == [0, 4, 0]
        await asyncio.gather(*(g.post(session, model="qwen", tokens=10) for _ in range(3)))
        assert [s.sent for s in g.servers] == [1, 5, 1]
    run(test)


def test_every_instance_full_queues_in_the_router_until_one_frees() -> None:
    """§9.1 with every instance's slots taken a request waits in the router (not inside a
    busy server) and goes to the first instance that frees."""
    async def test(g: Group, session):
        g.all_ready()
        await g.learned()
        long = [asyncio.create_task(g.post(session, tokens=100)) for _ in range(1)]
        await asyncio.sleep(0.05)
        short = [asyncio.create_task(g.post(session, tokens=2)) for _ in range(2)]
        await asyncio.sleep(0.05)
        late = asyncio.create_task(g.post(session, tokens=2))
        got = await asyncio.gather(*long, *short, late)
        assert [s for s, _ in got] == [200] * 4
        assert all(s.most_inside <= 1 for s in g.servers)  # never queued inside a server
        assert g.servers[0].sent == 1 and sum(s.sent for s in g.servers) == 4
    run(test, slots=(1, 1))


def test_an_instance_not_ready_or_draining_is_never_chosen() -> None:
    """§9.1 an instance that starts (WAIT) or whose gate is closed for a stop gets nothing."""
    async def test(g: Group, session):
        a, b, c = g.servers
        g.publish(instance(0, a.port), instance(1, b.port, RouteState.WAIT),
                  instance(2, c.port))
        g.book.close("chat/2", 10**9)
        got = await asyncio.gather(*(g.post(session, tokens=3) for _ in range(5)))
        assert [s for s, _ in got] == [200] * 5
        assert [a.sent, b.sent, c.sent] == [5, 0, 0]
    run(test)


def test_a_refused_connection_goes_to_another_instance_and_takes_it_out_at_once() -> None:
    """§9.1 an instance that refuses the connection is out of rotation at once, and the
    request, never sent, goes to another: no client sees the failure."""
    async def test(g: Group, session):
        g.all_ready()
        await g.learned()
        await g.servers[1].kill()
        got = await asyncio.gather(*(g.post(session, tokens=2) for _ in range(9)))
        assert [s for s, _ in got] == [200] * 9
        assert g.servers[0].sent + g.servers[2].sent == 9
        assert "chat/1" in g.proxy._out  # noqa: SLF001
        assert g.value("reconciler_router_out_of_rotation_total", "chat/1") == 1
        assert g.value("reconciler_router_lost_requests_total", "chat/1") == 0
    run(test)


def test_a_killed_instance_fails_only_its_requests_in_flight_and_comes_back_when_healthy() -> None:
    """§9.1 a kill fails the requests in flight on that instance (counted, a clear error),
    takes it out at once, nothing else fails; it is back when it answers /health again."""
    async def test(g: Group, session):
        g.all_ready()
        await g.learned()
        victim = g.servers[1]
        flying = [asyncio.create_task(g.post(session, tokens=30, stream=s))
                  for s in (False, True, False, True, False, True)]
        await asyncio.sleep(0.1)
        on_victim = victim.inside
        assert on_victim == 2
        await victim.kill()
        more = await asyncio.gather(*(g.post(session, tokens=2) for _ in range(6)))
        done = await asyncio.gather(*flying, return_exceptions=True)
        failed = [d for d in done if isinstance(d, Exception) or d[0] != 200]
        assert len(failed) == on_victim
        assert [s for s, _ in more] == [200] * 6
        assert g.value("reconciler_router_lost_requests_total", "chat/1") == on_victim
        removed = g.proxy._out["chat/1"]  # noqa: SLF001
        assert removed - victim.killed_at < 0.05  # out at once, not at the next pass
        sent = victim.sent
        await victim.start()  # the same port: answers /health again
        for _ in range(100):
            if "chat/1" not in g.proxy._out:  # noqa: SLF001
                break
            await asyncio.sleep(0.02)
        assert "chat/1" not in g.proxy._out  # noqa: SLF001
        await asyncio.gather(*(g.post(session, tokens=5) for _ in range(6)))
        assert victim.sent > sent
    run(test, per_token=0.01)


def test_an_instance_answering_5xx_is_taken_out_until_healthy() -> None:
    """§9.1 a 5xx answer is relayed as it is, and the instance is out of rotation: the
    requests after it go to the others."""
    async def test(g: Group, session):
        g.all_ready()
        await g.learned()
        g.servers[0].failing = True
        statuses = [(await g.post(session))[0] for _ in range(6)]
        assert statuses.count(500) == 1
        assert g.servers[0].sent == 1
    run(test)


def test_spillover_asks_for_the_next_instance_only_when_every_ready_one_is_full() -> None:
    """§9.1 an on-demand group asks for the start of its lowest stopped instance only while
    every ready instance is full; its requests queue meanwhile."""
    async def test(g: Group, session):
        a, b, _ = g.servers
        g.publish(instance(0, a.port, on_demand=True),
                  instance(1, b.port, RouteState.WAIT, on_demand=True),
                  instance(2, g.servers[2].port, RouteState.WAIT, on_demand=True))
        first = asyncio.create_task(g.post(session, tokens=30))
        await asyncio.sleep(0.05)
        demand = g.book.snapshot()[0]
        assert demand.of("chat/1").waiting == 0  # a ready instance had room
        second = asyncio.create_task(g.post(session, tokens=2))
        await asyncio.sleep(0.05)
        demand = g.book.snapshot()[0]
        assert demand.of("chat/1").wants_start and not demand.of("chat/2").wants_start
        g.publish(instance(0, a.port, on_demand=True), instance(1, b.port, on_demand=True),
                  instance(2, g.servers[2].port, RouteState.WAIT, on_demand=True))
        assert (await second)[0] == 200 and (await first)[0] == 200
        assert b.sent == 1
        assert g.book.snapshot()[0].of("chat/1").waiting == 0
    run(test, slots=(1, 1, 1), per_token=0.01)


def test_slots_learned_from_props_let_an_instance_take_that_many_at_once() -> None:
    """§9.1 capacity is the server's own ``total_slots``: 5 long requests over instances of
    4 and 1 slots all start at once (4 and 1), none waits in the router."""
    async def test(g: Group, session):
        g.publish(*(instance(i, s.port) for i, s in enumerate(g.servers)))
        await g.learned()
        got = await asyncio.gather(*(g.post(session, tokens=20) for _ in range(5)))
        assert [s for s, _ in got] == [200] * 5
        assert [s.most for s in g.servers] == [4, 1]
    run(test, slots=(4, 1))


def test_waiters_of_a_group_go_when_any_instance_is_ready() -> None:
    """§9.1 requests for a group none of whose instances is ready wait (as demand for
    instance 0), and go the moment a pass says any instance is ready, not only instance 0."""
    async def test(g: Group, session):
        a, b, c = g.servers
        g.publish(*(instance(i, s.port, RouteState.WAIT) for i, s in enumerate(g.servers)))
        waiting = [asyncio.create_task(g.post(session, tokens=2)) for _ in range(3)]
        for _ in range(500):  # until the requests have reached the router (not a fixed 0.1 s:
            if g.book.snapshot()[0].of("chat").wants_start:  # under load it was too short)
                break
            await asyncio.sleep(0.01)
        assert g.book.snapshot()[0].of("chat").wants_start and g.wakes >= 1
        g.publish(instance(0, a.port, RouteState.WAIT), instance(1, b.port, slots=2),
                  instance(2, c.port, RouteState.WAIT))  # (slots known: no /props look)
        got = await asyncio.wait_for(asyncio.gather(*waiting), 5)
        assert [s for s, _ in got] == [200] * 3 and b.sent == 3
    run(test)


def test_an_instance_the_plan_stopped_is_no_longer_looked_at() -> None:
    """§9.1 an instance out of rotation that a pass then stops (an on-demand idle stop) is
    not looked at any more: the pass that starts it again says when it is ready."""
    async def test(g: Group, session):
        g.all_ready()
        await g.servers[1].kill()
        assert [(await g.post(session))[0] for _ in range(3)] == [200] * 3
        assert "chat/1" in g.proxy._out  # noqa: SLF001
        a, b, c = g.servers
        stopped = attrs.evolve(instance(1, b.port, RouteState.WAIT, on_demand=True),
                               status="stopped")
        g.publish(instance(0, a.port), stopped, instance(2, c.port))
        for _ in range(150):
            if "chat/1" not in g.proxy._out:  # noqa: SLF001
                break
            await asyncio.sleep(0.02)
        assert "chat/1" not in g.proxy._out  # noqa: SLF001
        # (a look that has just ended leaves the set in its done callback, a step later)
        looks = [t for t in g.proxy._tasks  # noqa: SLF001
                 if "_recover" in repr(t.get_coro()) and not t.done()]
        assert not looks
    run(test)


def test_an_instance_that_does_not_answer_health_stays_out_of_rotation() -> None:
    """§9.1 an instance taken out comes back only when ``/health`` answers 200: a dead one
    (no answer at all) stays out past the hold and its polls, and no request reaches it."""
    async def test(g: Group, session):
        g.all_ready()
        await g.learned()
        victim = g.servers[1]
        await victim.kill()
        await asyncio.gather(*(g.post(session) for _ in range(3)))
        assert "chat/1" in g.proxy._out  # noqa: SLF001
        await asyncio.sleep(1.6)  # the 1 s hold, then several 50 ms looks that get no answer
        assert "chat/1" in g.proxy._out  # noqa: SLF001
        got = await asyncio.gather(*(g.post(session) for _ in range(6)))
        assert [s for s, _ in got] == [200] * 6
        assert g.value("reconciler_router_lost_requests_total", "chat/1") == 0
    run(test)
