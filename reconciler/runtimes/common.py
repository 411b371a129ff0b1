"""The probe vocabulary every runtime shares (PURE).

A runtime module never opens a socket. It describes what to ask
(``ProbeRequest``), is handed back what came of it (``ProbeAnswer``: a status
and a JSON body, or an error kind), and reads the answers into
``ProbeFacts``. The asking itself is ``reconciler/probe.py``'s job.

A probe is a small *exchange*: a generator that yields a batch of requests
(sent concurrently), receives the batch's answers, and finally returns every
answer by request path. Generators keep the branching ("/health said 404, so
ask /v1/models") here, pure and testable with scripted answers::

    def exchange(ctx):
        (health,) = yield (HEALTH,)
        ...
        return {"/health": health, ...}

Also here: ``names_match`` (is the wanted model among the listed ones) and
``probe_status`` (ProbeFacts → the §4 status and its one-line detail).
"""

from __future__ import annotations

import enum
from typing import Any, Generator, Mapping, Sequence

import attrs

from reconciler.core.decisions import Status
from reconciler.core.observed import Health, ProbeFacts

frozen = attrs.frozen(kw_only=True)

#: Response bodies above this are a transport error (BEHAVIOUR §2).
MAX_BODY = 1024 * 1024


class ErrorKind(enum.StrEnum):
    REFUSED = "refused"  # nothing listens: connection refused
    TIMEOUT = "timeout"  # no (complete) answer within the timeout
    TOO_LARGE = "too-large"  # body over MAX_BODY
    TRANSPORT = "transport"  # reset, protocol error, anything else on the wire


@frozen
class ProbeRequest:
    """One HTTP request to a server: method, path and an optional JSON body.

    ``max_timeout`` caps the probe timeout for this request (Ollama's
    ``/api/ps`` may block during a load: it gets a short one). ``text_limit``:
    how much of a body that is not JSON the answer keeps in ``text`` (a
    Prometheus exposition is read from its text, and it is longer than a message).
    """

    method: str
    path: str
    body: Any = attrs.field(default=None, hash=False)  # JSON-able, or None
    max_timeout: float | None = None
    text_limit: int | None = None  # None: the first 2000 characters

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


@frozen
class ProbeAnswer:
    """What came of one request: a status (and body) or an error kind."""

    status: int | None = None  # None when no HTTP answer arrived
    body: Any = attrs.field(default=None, hash=False)  # parsed JSON, or None
    text: str = ""  # the start of the body, for messages
    error: ErrorKind | None = None
    error_detail: str = ""
    latency: float | None = None  # seconds

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def answered(self) -> bool:
        return self.status is not None


#: An exchange: yields request batches, receives answer batches, returns answers by path.
Exchange = Generator[
    tuple[ProbeRequest, ...], tuple[ProbeAnswer, ...], dict[str, ProbeAnswer]
]


@frozen
class ProbeContext:
    """What the runtime modules need to know about the role they probe.

    ``wanted``: the model name the server should list (llama.cpp alias,
    Ollama tag). ``starting``: a start was made and the server has not
    answered since. ``readiness``: send the runtime's readiness request
    (mlx-lm's one-token completion) that proves the model loaded — only to
    our own live process after a start, never to adopted roles.
    ``launch_argv``: the argv this reconciler launched the process with.
    ``settled``: the server is our own live process (pid + create time +
    marker) listening on the port, and it has answered healthy since it was
    created: what it serves is what ``launch_argv`` says, so a runtime may
    take its identity from there instead of asking for it again every pass.
    ``version``: §14, see below.
    """

    wanted: str | None = None
    adopted: bool = False
    starting: bool = False
    readiness: bool = False
    launch_argv: tuple[str, ...] = ()
    settled: bool = False
    #: §14 the role runs a Program: ask the server's own build (llama.cpp ``/props``) on
    #: every pass, settled or not, so that its version is checked against the Program's.
    version: bool = False


def argv_value(argv: Sequence[str], flag: str) -> str | None:
    """The value after ``flag`` in a launch argv (separate arguments, as launched)."""
    for i, arg in enumerate(argv[:-1]):
        if arg == flag:
            return argv[i + 1]
    return None


# ---------------------------------------------------------------- names


def _strip_latest(name: str) -> str:
    return name[: -len(":latest")] if name.endswith(":latest") else name


def names_match(wanted: str, listed: str) -> bool:
    """Does a server's listed model name mean the wanted one? Case-insensitive.

    Exact; or equal once a ``:latest`` tag is dropped (Ollama); or, when the
    listed name is a path, its last segment without ``.gguf`` contains the
    wanted name (llama-server lists the model path when no alias is set).
    """
    w, lst = wanted.strip().lower(), listed.strip().lower()
    if not w or not lst:
        return False
    if w == lst or _strip_latest(w) == _strip_latest(lst):
        return True
    if "/" in lst or lst.endswith(".gguf"):
        segment = lst.rstrip("/").rsplit("/", 1)[-1]
        if segment.endswith(".gguf"):
            segment = segment[: -len(".gguf")]
        return w in segment
    return False


def listed_match(wanted: str, listed: tuple[str, ...]) -> str | None:
    """The first listed name that means ``wanted``, or None."""
    return next((name for name in listed if names_match(wanted, name)), None)


# ---------------------------------------------------------------- answers → facts


def seconds(value: float) -> str:
    return f"{value:g}s"


def failure_detail(request: ProbeRequest, answer: ProbeAnswer) -> str:
    """One line for a request that got no usable answer."""
    if answer.error is ErrorKind.REFUSED:
        return "not listening (connection refused)"
    if answer.error is ErrorKind.TIMEOUT:
        return f"no answer to {request} {answer.error_detail}".rstrip()
    if answer.error is ErrorKind.TOO_LARGE:
        return f"{request}: answer larger than 1 MiB"
    if answer.error is not None:
        return f"{request}: {answer.error_detail or answer.error}"
    if answer.status is not None and 300 <= answer.status < 400:
        return f"{request} answered {answer.status} (redirects are not followed)"
    return f"{request} answered {answer.status}{_snippet(answer)}"


def _snippet(answer: ProbeAnswer) -> str:
    message = error_message(answer)
    return f": {message}" if message else ""


def error_message(answer: ProbeAnswer) -> str:
    """The server's own error text: ``{"error": "..."}``, ``{"error": {"message"}}``, or text."""
    body = answer.body
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            err = err.get("message")
        if isinstance(err, str):
            return err[:200]
    return answer.text.strip().splitlines()[0][:200] if answer.text.strip() else ""


def unreachable(
    request: ProbeRequest, answer: ProbeAnswer, ctx: ProbeContext, **extra: Any
) -> ProbeFacts:
    """Facts for a server that could not be asked: refused, timed out, broken."""
    detail = failure_detail(request, answer)
    if ctx.starting:
        detail = (
            "starting: not listening yet (connection refused)"
            if answer.error is ErrorKind.REFUSED
            else f"starting: {detail}"
        )
    return ProbeFacts(
        health=Health.UNREACHABLE, detail=detail, starting=ctx.starting,
        timed_out=answer.error is ErrorKind.TIMEOUT, latency=answer.latency, **extra,
    )


#: §4 the status of a server that answers, by its probe's health: the one mapping
#: from a probe result to a status (the planner's adopted rung and ``health`` use it).
ANSWERING_STATUS: Mapping[Health, Status] = {
    Health.UP: Status.RUNNING,
    Health.LOADING: Status.LOADING,
    Health.UNHEALTHY: Status.DEGRADED,
}
_ANSWERING_DETAIL = {Health.UP: "answering", Health.LOADING: "loading model",
                     Health.UNHEALTHY: "answering but unhealthy"}


def probe_status(facts: ProbeFacts | None) -> tuple[Status, str]:
    """The §4 status a probe alone implies, with its one-line detail.

    Process facts can overrule it (a dead process is ``exited``); an
    unreachable server that is not starting is ``unknown``: unknown is not down.
    """
    if facts is None:
        return Status.UNKNOWN, "not probed"
    health = facts.health
    if health in ANSWERING_STATUS:
        return ANSWERING_STATUS[health], facts.detail or _ANSWERING_DETAIL[health]
    if health is Health.NOT_PROBED:
        return Status.REFUSED, facts.detail or "port outside allowed_ports: not probed"
    if facts.starting:
        return Status.STARTING, facts.detail
    return Status.UNKNOWN, facts.detail or "unreachable"


def json_list(body: Any, key: str) -> list[Any]:
    """``body[key]`` when it is a list, else []: parsers never trust a shape."""
    if isinstance(body, dict) and isinstance(body.get(key), list):
        return body[key]
    return []


# ---------------------------------------------------------------- deep health


@frozen
class DeepResult:
    """The verdict of a deep health request: pass or fail, and why."""

    ok: bool
    detail: str
    latency: float | None = None


def deep_verdict(request: ProbeRequest, answer: ProbeAnswer) -> DeepResult:
    """200 = pass (BEHAVIOUR §2); anything else fails with the server's reason."""
    if not answer.ok:
        return DeepResult(ok=False, detail=failure_detail(request, answer), latency=answer.latency)
    took = f" in {answer.latency:.3f}s" if answer.latency is not None else ""
    tokens = None
    if isinstance(answer.body, dict):
        usage = answer.body.get("usage")
        if isinstance(usage, dict):
            tokens = usage.get("completion_tokens")
        elif isinstance(answer.body.get("eval_count"), int):
            tokens = answer.body["eval_count"]
    counted = f" ({tokens} token{'s' if tokens != 1 else ''})" if isinstance(tokens, int) else ""
    return DeepResult(
        ok=True, detail=f"{request} answered 200{took}{counted}", latency=answer.latency
    )


def hi_messages() -> list[dict[str, str]]:
    """The one-message conversation every deep health request sends."""
    return [{"role": "user", "content": "hi"}]
