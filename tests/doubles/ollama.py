"""A protocol DOUBLE of Ollama, for tests only. It is not Ollama.

The Ollama binary cannot be had offline (design/SERVERS.md), so the tests
drive this instead: a real HTTP server on 127.0.0.1 (standard library only),
run in a background thread, that answers the part of Ollama's HTTP API the
reconciler uses the way Ollama's documentation (docs/api.md) and server
source (server/routes.go, server/sched.go, api/types.go) say it does.

Imitated:

- ``GET|HEAD /`` -> 200 ``Ollama is running`` (text/plain).
- ``GET|HEAD /api/version`` -> ``{"version": "0.12.3"}``.
- ``GET|HEAD /api/tags`` -> the pulled models, newest first, each with
  ``name``/``model`` carrying the tag (``llama3.2:latest``), ``modified_at``,
  ``size``, ``digest`` and ``details``.
- ``GET /api/ps`` -> the resident models, longest time left first, each with
  ``name``, ``model``, ``size``, ``digest``, ``details``, ``expires_at``,
  ``size_vram`` (and ``context_length``). While a load is in flight the
  request BLOCKS until the load finishes. That is the behaviour the design
  asks clients to cope with (BEHAVIOUR.md §2: "may block during a load");
  current Ollama source instead lists the loading model at once. Pass
  ``ps_blocks_during_load=False`` to get that variant.
- ``POST /api/generate``: an empty prompt loads the model (taking
  ``load_seconds``) and answers ``done_reason: "load"``; an empty prompt with
  ``keep_alive`` 0 unloads it (``done_reason: "unload"``, even if it was not
  loaded); a non-empty prompt loads if needed and "generates" the single
  token ``hi`` (``done_reason: "stop"``, ``eval_count`` 1), streamed as
  NDJSON unless ``"stream": false``. ``model`` in the answer echoes the
  request as sent, like Ollama.
- ``POST /api/chat``: the same with ``messages`` (an empty list loads or
  unloads; otherwise the answer is ``{"role": "assistant", "content": "hi"}``).
- ``keep_alive`` exactly as Ollama's ``api.Duration`` parses it: a JSON
  number is seconds, a string is a Go duration (``"5m"``, ``"1h30m"``,
  ``"0"``; ``"30"`` without a unit is a 400 with Go's own message), anything
  negative means forever (shown as an ``expires_at`` ~292 years ahead, as
  Go's ``time.Now().Add(math.MaxInt64)`` gives), missing or null means the
  server default (5m). Every generate/chat request re-sets the model's expiry,
  counted from when the request finishes; ``keep_alive`` 0 on a request with
  a prompt unloads the model after it answers.
- Expiry is evaluated lazily on each request against an injectable
  ``clock`` (seconds, monotonic), so tests can advance time.
- Names: the tag defaults to ``latest`` (``llama3.2`` is ``llama3.2:latest``),
  a ``registry.ollama.ai/`` host and ``library/`` namespace are optional, and
  matching is case-insensitive.
- An unpulled model -> 404 ``{"error": "model 'x' not found"}`` with ``x`` as
  sent (the wording of current server/routes.go for /api/generate and
  /api/chat; older releases said ``model "x" not found, try pulling it first``,
  which current source still uses only for a scheduler-level miss).
- A missing model field -> 400 ``{"error": "model is required"}``; a missing
  body -> 400 ``{"error": "missing request body"}``.
- Unknown paths -> 404 ``404 page not found`` (text/plain, like gin); a known
  path with the wrong method -> 405 ``405 method not allowed``.

Not imitated: pulling, deleting, copying, creating, pushing, show, embeddings,
the OpenAI-compatible ``/v1`` routes and every other route: they answer 404 so
that a test can assert the reconciler never called them (every request is
recorded in ``requests``). No real inference, memory accounting, GPU
placement, OLLAMA_MAX_LOADED_MODELS eviction, request queueing limits,
options/format/images/tools, Host-header checks or CORS. Unloading is
synchronous here (in Ollama the model leaves /api/ps a moment after the
unload answer). Timestamps are UTC (Ollama uses the local zone for
``expires_at``/``modified_at``) but keep Go's RFC 3339 nanosecond form.

``stop()`` drops the open connections, as Go's ``http.Server.Close`` does;
each answer leaves in one write (Go buffers a small answer), so a client
cut off by it gets all of an answer or none of it, never half.

Test hooks (not part of Ollama): ``evict(tag)``, ``requests``,
``clear_requests()``, ``set_load_seconds(s)``, ``finish_loads()``, ``pulled``, ``add_pulled(tag)``,
``remove_pulled(tag)``, ``resident()``, ``loading()``, ``loads``,
``keep_alive_remaining(tag)``. ``ManualClock`` is a clock tests can advance.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import socket
import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable
from urllib.parse import urlsplit

__all__ = [
    "OllamaDouble",
    "ManualClock",
    "KeepAliveError",
    "parse_go_duration",
    "parse_keep_alive",
    "canonical_name",
    "FOREVER_NS",
]

#: Go's math.MaxInt64 nanoseconds: what Ollama stores for a negative keep_alive.
FOREVER_NS = 2**63 - 1

_NS_PER_UNIT = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek small letter mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}

_ROUTES = {
    "/": {"GET", "HEAD"},
    "/api/version": {"GET", "HEAD"},
    "/api/tags": {"GET", "HEAD"},
    "/api/ps": {"GET"},
    "/api/generate": {"POST"},
    "/api/chat": {"POST"},
}


class KeepAliveError(ValueError):
    """A keep_alive value Ollama rejects (it answers 400 with this message)."""


def _go_quote(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def parse_go_duration(text: str) -> int:
    """Parse a Go ``time.ParseDuration`` string into nanoseconds.

    Raises KeepAliveError with Go's error text (e.g. ``time: missing unit in
    duration "30"``).
    """
    orig = text
    s = text
    negative = False
    if s and s[0] in "+-":
        negative = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if s == "":
        raise KeepAliveError(f"time: invalid duration {_go_quote(orig)}")
    total = 0
    while s:
        i = 0
        while i < len(s) and s[i] in "0123456789":
            i += 1
        whole, s = s[:i], s[i:]
        frac = ""
        if s.startswith("."):
            s = s[1:]
            j = 0
            while j < len(s) and s[j] in "0123456789":
                j += 1
            frac, s = s[:j], s[j:]
        if not whole and not frac:
            raise KeepAliveError(f"time: invalid duration {_go_quote(orig)}")
        k = 0
        while k < len(s) and s[k] != "." and s[k] not in "0123456789":
            k += 1
        if k == 0:
            raise KeepAliveError(f"time: missing unit in duration {_go_quote(orig)}")
        unit_name, s = s[:k], s[k:]
        unit = _NS_PER_UNIT.get(unit_name)
        if unit is None:
            raise KeepAliveError(
                f"time: unknown unit {_go_quote(unit_name)} in duration {_go_quote(orig)}"
            )
        total += int(whole or "0") * unit
        if frac:
            total += int(frac) * unit // 10 ** len(frac)
        if total > FOREVER_NS:
            raise KeepAliveError(f"time: invalid duration {_go_quote(orig)}")
    return -total if negative else total


def parse_keep_alive(value: Any, default_ns: int = 5 * 60 * 1_000_000_000) -> int:
    """Ollama's ``api.Duration`` semantics: nanoseconds, FOREVER_NS for negative.

    ``None`` (missing or JSON null) gives ``default_ns``. A number is seconds;
    a string is a Go duration; a negative value of either kind is forever.
    """
    if value is None:
        return default_ns
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise KeepAliveError(f"unsupported type: '{type(value).__name__}'")
    if isinstance(value, str):
        ns = parse_go_duration(value)
    else:
        if value < 0:
            return FOREVER_NS
        ns = min(int(value * 1_000_000_000), FOREVER_NS)
    return FOREVER_NS if ns < 0 else ns


def canonical_name(name: str) -> str:
    """``llama3.2`` -> ``llama3.2:latest``; drops Ollama's default host/namespace."""
    n = name.strip()
    lowered = n.lower()
    for prefix in ("registry.ollama.ai/", "library/"):
        if lowered.startswith(prefix):
            n = n[len(prefix):]
            lowered = n.lower()
    last = n.rsplit("/", 1)[-1]
    if ":" not in last:
        n += ":latest"
    return n


def _rfc3339(dt: datetime) -> str:
    """Go's RFC3339Nano rendering (trailing zeros of the fraction trimmed)."""
    dt = dt.astimezone(timezone.utc)
    base = dt.strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{dt.microsecond * 1000:09d}".rstrip("0")
    return f"{base}.{frac}Z" if frac else f"{base}Z"


class ManualClock:
    """A monotonic clock for tests: ``clock()`` reads it, ``advance(s)`` moves it."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


class _Model:
    __slots__ = ("name", "size", "digest", "modified_at", "details")

    def __init__(self, name: str, modified_at: datetime) -> None:
        self.name = name
        h = hashlib.sha256(name.lower().encode()).hexdigest()
        self.digest = h
        self.size = 500_000_000 + int(h[:8], 16) % 4_000_000_000
        self.modified_at = modified_at
        self.details = {
            "parent_model": "",
            "format": "gguf",
            "family": "llama",
            "families": ["llama"],
            "parameter_size": "3.2B",
            "quantization_level": "Q4_K_M",
        }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    double: "OllamaDouble"

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that time out (the /api/ps blocking test) close their end;
        # a failed write to them is expected, not a test failure.
        pass


class OllamaDouble:
    """A loopback HTTP server imitating Ollama's API; see the module docstring.

    ``with OllamaDouble(pulled=["llama3.2:latest"], load_seconds=0.0) as o:``
    then talk to ``o.url``.
    """

    def __init__(
        self,
        pulled: Iterable[str] = (),
        *,
        load_seconds: float = 0.0,
        port: int = 0,
        clock: Callable[[], float] = time.monotonic,
        version: str = "0.12.3",
        default_keep_alive: Any = "5m",
        ps_blocks_during_load: bool = True,
    ) -> None:
        self.version = version
        self.ps_blocks_during_load = ps_blocks_during_load
        self._clock = clock
        self._default_keep_alive_ns = parse_keep_alive(default_keep_alive)
        self._load_seconds = float(load_seconds)
        self._requested_port = port
        self._cond = threading.Condition()
        self._models: dict[str, _Model] = {}  # lower-cased canonical name -> model
        self._resident: dict[str, float] = {}  # key -> expiry on self._clock
        self._forever: set[str] = set()
        self._session: dict[str, int] = {}  # keep_alive (ns) of the request in flight
        self._loading: set[str] = set()
        self._loads: list[str] = []
        self._requests: list[tuple[str, str, Any]] = []
        self._stopping = threading.Event()
        self._finish = threading.Event()  # finish_loads(): every load in flight ends now
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        base = datetime.now(timezone.utc)
        for i, name in enumerate(pulled):
            self._add_model(name, base - timedelta(minutes=i))

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> "OllamaDouble":
        if self._server is not None:
            return self
        server = _Server(("127.0.0.1", self._requested_port), _Handler)
        server.double = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"ollama-double:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server = self._server
        if server is None:
            return
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        server.shutdown()
        with self._cond:
            conns = list(self._connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> "OllamaDouble":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("OllamaDouble is not started")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ---------------------------------------------------------------- test hooks
    @property
    def requests(self) -> list[tuple[str, str, Any]]:
        """Every request received, in order: (method, path, parsed JSON body or None)."""
        with self._cond:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._cond:
            self._requests.clear()

    @property
    def pulled(self) -> list[str]:
        with self._cond:
            return [m.name for m in self._models.values()]

    def add_pulled(self, name: str) -> str:
        with self._cond:
            return self._add_model(name, datetime.now(timezone.utc)).name

    def remove_pulled(self, name: str) -> None:
        with self._cond:
            self._models.pop(canonical_name(name).lower(), None)

    def set_load_seconds(self, seconds: float) -> None:
        with self._cond:
            self._load_seconds = float(seconds)

    def finish_loads(self) -> None:
        """End every load in flight now (and every later one at once): a test that holds
        a load for as long as it looks at it, whatever the machine's load, then lets it go."""
        self._finish.set()

    def evict(self, name: str) -> bool:
        """Unload a model behind the client's back; True if it was resident."""
        key = canonical_name(name).lower()
        with self._cond:
            self._forever.discard(key)
            return self._resident.pop(key, None) is not None

    def resident(self) -> list[str]:
        """Names (with tag) of resident models, after applying expiry."""
        with self._cond:
            self._expire_locked()
            return sorted(self._display(k) for k in self._resident)

    def loading(self) -> list[str]:
        with self._cond:
            return sorted(self._display(k) for k in self._loading)

    @property
    def loads(self) -> list[str]:
        """Names of the models loaded so far, one entry per load, in order."""
        with self._cond:
            return list(self._loads)

    def keep_alive_remaining(self, name: str) -> float | None:
        """Seconds until the model expires (math.inf if forever); None if not resident."""
        key = canonical_name(name).lower()
        with self._cond:
            self._expire_locked()
            if key not in self._resident:
                return None
            if key in self._forever:
                return math.inf
            return self._resident[key] - self._clock()

    # ----------------------------------------------------------------- internals
    def _add_model(self, name: str, modified_at: datetime) -> _Model:
        canon = canonical_name(name)
        model = _Model(canon, modified_at)
        self._models[canon.lower()] = model
        return model

    def _display(self, key: str) -> str:
        model = self._models.get(key)
        return model.name if model is not None else key

    def _lookup(self, name: str) -> _Model | None:
        with self._cond:
            return self._models.get(canonical_name(name).lower())

    def _record(self, method: str, path: str, body: Any) -> None:
        with self._cond:
            self._requests.append((method, path, body))

    def _expire_locked(self) -> None:
        now = self._clock()
        for key, expiry in list(self._resident.items()):
            if key not in self._forever and expiry <= now:
                del self._resident[key]

    def _ensure_loaded(self, key: str, keep_alive_ns: int) -> int:
        """Make the model resident (in use: no expiry yet). Returns load time in ns."""
        with self._cond:
            self._expire_locked()
            self._session[key] = keep_alive_ns
            # Wait while this model is loading, or while any load is in flight
            # if this model still needs loading (the scheduler loads one at a time).
            while not self._stopping.is_set() and (
                key in self._loading or (key not in self._resident and self._loading)
            ):
                self._cond.wait()
            if key in self._resident:
                self._resident[key] = math.inf
                return 0
            self._loading.add(key)
            seconds = self._load_seconds
        started = time.monotonic()
        try:
            deadline = started + seconds
            while not (self._stopping.is_set() or self._finish.is_set()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._finish.wait(min(left, 0.05))
        finally:
            with self._cond:
                self._loading.discard(key)
                self._resident[key] = math.inf
                self._forever.discard(key)
                self._loads.append(self._display(key))
                self._cond.notify_all()
        return int((time.monotonic() - started) * 1e9)

    def _touch(self, key: str, keep_alive_ns: int) -> None:
        """A request finished: restart the model's keep-alive (0 unloads it)."""
        with self._cond:
            if keep_alive_ns == 0:
                self._resident.pop(key, None)
                self._forever.discard(key)
            elif keep_alive_ns >= FOREVER_NS:
                self._resident[key] = self._clock() + FOREVER_NS / 1e9
                self._forever.add(key)
            else:
                self._resident[key] = self._clock() + keep_alive_ns / 1e9
                self._forever.discard(key)

    def _unload(self, key: str) -> None:
        with self._cond:
            self._resident.pop(key, None)
            self._forever.discard(key)

    def _ps_body(self) -> dict[str, Any]:
        with self._cond:
            if self.ps_blocks_during_load:
                while self._loading and not self._stopping.is_set():
                    self._cond.wait()
            self._expire_locked()
            now = self._clock()
            wall = datetime.now(timezone.utc)
            rows = []
            keys = list(self._resident)
            if not self.ps_blocks_during_load:
                keys += [k for k in self._loading if k not in self._resident]
            for key in keys:
                model = self._models.get(key)
                if model is None:
                    continue
                expiry = self._resident.get(key, math.inf)
                if key in self._forever:
                    left_ns = FOREVER_NS
                elif math.isinf(expiry):  # loading or in use: Ollama shows now + keep_alive
                    left_ns = self._session.get(key, self._default_keep_alive_ns)
                else:
                    left_ns = int((expiry - now) * 1e9)
                expires_at = wall + timedelta(microseconds=left_ns // 1000)
                rows.append(
                    (
                        left_ns,
                        {
                            "name": model.name,
                            "model": model.name,
                            "size": model.size,
                            "digest": model.digest,
                            "details": dict(model.details),
                            "expires_at": _rfc3339(expires_at),
                            "size_vram": model.size,
                            "context_length": 4096,
                        },
                    )
                )
        rows.sort(key=lambda r: r[0], reverse=True)
        return {"models": [r[1] for r in rows]}

    def _tags_body(self) -> dict[str, Any]:
        with self._cond:
            models = sorted(self._models.values(), key=lambda m: m.modified_at, reverse=True)
            return {
                "models": [
                    {
                        "name": m.name,
                        "model": m.name,
                        "modified_at": _rfc3339(m.modified_at),
                        "size": m.size,
                        "digest": m.digest,
                        "details": dict(m.details),
                    }
                    for m in models
                ]
            }


def _now() -> str:
    return _rfc3339(datetime.now(timezone.utc))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    server_version = "OllamaDouble"
    sys_version = ""

    # -------------------------------------------------------------- plumbing
    def setup(self) -> None:
        super().setup()
        double = self.server.double
        with double._cond:
            double._connections.add(self.connection)

    def finish(self) -> None:
        double = self.server.double
        with double._cond:
            double._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        # The whole answer leaves in ONE write, as Go's buffered ResponseWriter sends a
        # small answer: a stop() that drops the connection meanwhile leaves the client
        # all of it or none of it, never headers without their body (IncompleteRead).
        buffer = io.BytesIO()
        wire, self.wfile = self.wfile, buffer
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            answer = buffer.getvalue()
        finally:
            self.wfile = wire
        try:
            wire.write(answer)
        except OSError:
            self.close_connection = True

    def _json(self, status: int, obj: Any) -> None:
        body = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
        self._send(status, body, "application/json; charset=utf-8")

    def _ndjson(self, objs: list[Any]) -> None:
        body = b"".join(
            json.dumps(o, ensure_ascii=False, separators=(",", ":")).encode() + b"\n" for o in objs
        )
        self._send(200, body, "application/x-ndjson")

    def _text(self, status: int, text: str) -> None:
        self._send(status, text.encode(), "text/plain; charset=utf-8")

    # -------------------------------------------------------------- dispatch
    def _dispatch(self) -> None:
        double = self.server.double
        path = urlsplit(self.path).path
        raw = self._read_body()
        parsed: Any = None
        parse_error: str | None = None
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError as e:
                parsed = raw.decode("utf-8", "replace")
                parse_error = str(e)
        double._record(self.command, path, parsed)

        allowed = _ROUTES.get(path)
        if allowed is None:
            self._text(404, "404 page not found")
            return
        if self.command not in allowed:
            self._text(405, "405 method not allowed")
            return

        if path == "/":
            self._text(200, "Ollama is running")
        elif path == "/api/version":
            self._json(200, {"version": double.version})
        elif path == "/api/tags":
            self._json(200, double._tags_body())
        elif path == "/api/ps":
            self._json(200, double._ps_body())
        else:
            if not raw:
                self._json(400, {"error": "missing request body"})
            elif parse_error is not None:
                self._json(400, {"error": parse_error})
            elif not isinstance(parsed, dict):
                self._json(400, {"error": "json: cannot unmarshal into Go value of type api.Request"})
            else:
                self._inference(path == "/api/chat", parsed)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _dispatch

    # ------------------------------------------------------------- inference
    def _inference(self, chat: bool, req: dict[str, Any]) -> None:
        double = self.server.double
        # Binding the JSON body (keep_alive included) happens before anything else.
        try:
            keep_alive_given = req.get("keep_alive") is not None
            keep_alive_ns = parse_keep_alive(req.get("keep_alive"), double._default_keep_alive_ns)
        except KeepAliveError as e:
            self._json(400, {"error": str(e)})
            return
        name = req.get("model")
        if not isinstance(name, str) or not name.strip():
            self._json(400, {"error": "model is required"})
            return
        if chat:
            messages = req.get("messages") or []
            if not isinstance(messages, list):
                self._json(400, {"error": "json: cannot unmarshal messages"})
                return
            empty = len(messages) == 0
        else:
            prompt = req.get("prompt") or ""
            if not isinstance(prompt, str):
                self._json(400, {"error": "json: cannot unmarshal prompt"})
                return
            empty = prompt == ""

        model = double._lookup(name)
        if model is None:
            self._json(404, {"error": f"model '{name}' not found"})
            return
        key = model.name.lower()

        def reply(content: str, done_reason: str) -> dict[str, Any]:
            out: dict[str, Any] = {"model": name, "created_at": _now()}
            if chat:
                out["message"] = {"role": "assistant", "content": content}
            else:
                out["response"] = content
            out["done"] = True
            out["done_reason"] = done_reason
            return out

        if empty and keep_alive_given and keep_alive_ns == 0:
            double._unload(key)
            self._json(200, reply("", "unload"))
            return

        load_ns = double._ensure_loaded(key, keep_alive_ns)
        if double._stopping.is_set():
            self._json(500, {"error": "server shutting down"})
            return

        if empty:
            double._touch(key, keep_alive_ns)
            self._json(200, reply("", "load"))
            return

        final = reply("hi", "stop")
        final.update(
            {
                "total_duration": load_ns + 2_000_000,
                "load_duration": load_ns,
                "prompt_eval_count": 1,
                "prompt_eval_duration": 1_000_000,
                "eval_count": 1,
                "eval_duration": 1_000_000,
            }
        )
        double._touch(key, keep_alive_ns)
        if req.get("stream", True) is False:
            self._json(200, final)
            return
        chunk: dict[str, Any] = {"model": name, "created_at": final["created_at"]}
        if chat:
            chunk["message"] = {"role": "assistant", "content": "hi"}
            final["message"] = {"role": "assistant", "content": ""}
        else:
            chunk["response"] = "hi"
            final["response"] = ""
        chunk["done"] = False
        self._ndjson([chunk, final])
