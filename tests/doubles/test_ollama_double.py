"""Pins the behaviour of the Ollama protocol double, through raw urllib (no httpx)."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

import pytest

from . import ollama
from .ollama import (
    FOREVER_NS,
    KeepAliveError,
    ManualClock,
    OllamaDouble,
    canonical_name,
    parse_go_duration,
    parse_keep_alive,
)

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def call(url: str, method: str = "GET", body: object = None, timeout: float = 5.0):
    """Return (status, headers, raw bytes) without raising on HTTP errors."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with _NO_PROXY.open(req, timeout=timeout) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers, e.read()


def get_json(o: OllamaDouble, path: str, timeout: float = 5.0):
    status, _, raw = call(o.url + path, timeout=timeout)
    return status, json.loads(raw)


def post_json(o: OllamaDouble, path: str, body: object, timeout: float = 5.0):
    status, _, raw = call(o.url + path, "POST", body, timeout=timeout)
    return status, json.loads(raw)


def load(o: OllamaDouble, model: str, keep_alive: object = None, **extra):
    body = {"model": model, "prompt": "", "stream": False, **extra}
    if keep_alive is not None:
        body["keep_alive"] = keep_alive
    return post_json(o, "/api/generate", body)


def ps_names(o: OllamaDouble) -> list[str]:
    return [m["name"] for m in get_json(o, "/api/ps")[1]["models"]]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def o(clock: ManualClock):
    with OllamaDouble(pulled=["llama3.2:latest", "qwen2.5:0.5b"], clock=clock) as double:
        yield double


# ------------------------------------------------------------------ plain GETs
def test_root_get_and_head_say_running(o):
    """GET / answers 200 'Ollama is running'; HEAD / answers 200 with no body."""
    status, headers, raw = call(o.url + "/")
    assert (status, raw) == (200, b"Ollama is running")
    assert headers["Content-Type"].startswith("text/plain")
    status, headers, raw = call(o.url + "/", "HEAD")
    assert (status, raw, headers["Content-Length"]) == (200, b"", "17")


def test_version(o):
    """GET /api/version answers {"version": "0.12.3"}."""
    assert get_json(o, "/api/version") == (200, {"version": "0.12.3"})


def test_tags_lists_pulled_models_with_their_tag(o):
    """GET /api/tags lists every pulled model with name/model carrying the tag and full fields."""
    status, body = get_json(o, "/api/tags")
    assert status == 200
    assert [m["name"] for m in body["models"]] == ["llama3.2:latest", "qwen2.5:0.5b"]
    first = body["models"][0]
    assert set(first) == {"name", "model", "modified_at", "size", "digest", "details"}
    assert first["model"] == "llama3.2:latest"
    assert len(first["digest"]) == 64 and first["size"] > 0
    assert first["details"]["format"] == "gguf"
    assert datetime.fromisoformat(first["modified_at"]).tzinfo is not None


def test_untagged_pulled_name_gets_latest():
    """A model pulled as 'llama3.2' is listed as 'llama3.2:latest'."""
    with OllamaDouble(pulled=["llama3.2"]) as o:
        assert [m["name"] for m in get_json(o, "/api/tags")[1]["models"]] == ["llama3.2:latest"]
        assert o.pulled == ["llama3.2:latest"]


def test_ps_is_empty_before_any_load(o):
    """GET /api/ps answers {"models": []} when nothing is resident."""
    assert get_json(o, "/api/ps") == (200, {"models": []})


# ------------------------------------------------------------- load / unload
def test_empty_prompt_loads_and_model_becomes_resident(o):
    """An empty-prompt generate answers done_reason 'load' and the model appears in /api/ps."""
    status, body = load(o, "llama3.2:latest", "10m")
    assert status == 200
    assert body["model"] == "llama3.2:latest"
    assert body["response"] == "" and body["done"] is True and body["done_reason"] == "load"
    assert datetime.fromisoformat(body["created_at"]).tzinfo is not None
    _, ps = get_json(o, "/api/ps")
    (row,) = ps["models"]
    assert set(row) >= {"name", "model", "size", "digest", "details", "expires_at", "size_vram"}
    assert row["name"] == row["model"] == "llama3.2:latest"
    assert o.resident() == ["llama3.2:latest"]
    assert o.loads == ["llama3.2:latest"]


def test_latest_is_implicit_in_requests(o):
    """'llama3.2' and 'llama3.2:latest' name the same model; the answer echoes the name as sent."""
    status, body = load(o, "llama3.2")
    assert (status, body["model"]) == (200, "llama3.2")
    assert ps_names(o) == ["llama3.2:latest"]
    status, body = load(o, "llama3.2:latest")
    assert o.loads == ["llama3.2:latest"]  # already resident: no second load
    status, body = load(o, "llama3.2", keep_alive=0)
    assert body["done_reason"] == "unload"
    assert ps_names(o) == []


@pytest.mark.parametrize("zero", [0, "0", "0s", 0.0])
def test_keep_alive_zero_unloads(o, zero):
    """keep_alive 0 (number or '0'/'0s') with an empty prompt answers 'unload' and leaves /api/ps."""
    load(o, "qwen2.5:0.5b")
    assert ps_names(o) == ["qwen2.5:0.5b"]
    status, body = load(o, "qwen2.5:0.5b", zero)
    assert (status, body["done"], body["done_reason"], body["response"]) == (200, True, "unload", "")
    assert ps_names(o) == []


def test_unload_of_a_pulled_but_idle_model_still_answers_unload(o):
    """Unloading a pulled model that is not resident is a 200 'unload', like Ollama."""
    status, body = load(o, "qwen2.5:0.5b", 0)
    assert (status, body["done_reason"]) == (200, "unload")
    assert o.loads == []


def test_load_takes_load_seconds_only_when_not_resident(o):
    """A load takes load_seconds; a request for a resident model does not wait."""
    o.set_load_seconds(0.2)
    t0 = time.monotonic()
    load(o, "llama3.2")
    assert time.monotonic() - t0 >= 0.2
    # Not waiting is told from waiting by a load far longer than any scheduling delay
    # (an absolute 0.15 s against a 0.2 s load failed beside two CPU burners: 0.19 s);
    # had the request waited, the client's 5 s timeout would fail it.
    o.set_load_seconds(30)
    t0 = time.monotonic()
    assert load(o, "llama3.2")[0] == 200
    assert time.monotonic() - t0 < 2
    assert o.loads == ["llama3.2:latest"]


def test_ps_blocks_while_a_load_is_in_flight(o):
    """/api/ps does not answer while a load is in flight (a 0.1 s client times out), then lists it."""
    o.set_load_seconds(0.5)
    results = []
    t = threading.Thread(target=lambda: results.append(load(o, "llama3.2:latest")))
    t.start()
    deadline = time.monotonic() + 2
    while not o.loading() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert o.loading() == ["llama3.2:latest"]
    with pytest.raises((TimeoutError, urllib.error.URLError)) as exc:
        call(o.url + "/api/ps", timeout=0.1)
    if isinstance(exc.value, urllib.error.URLError):
        assert isinstance(exc.value.reason, TimeoutError)
    status, body = get_json(o, "/api/ps", timeout=3)
    assert status == 200 and [m["name"] for m in body["models"]] == ["llama3.2:latest"]
    t.join(3)
    assert results and results[0][1]["done_reason"] == "load"


def test_ps_non_blocking_variant_lists_a_loading_model():
    """With ps_blocks_during_load=False, /api/ps answers at once and includes the loading model."""
    with OllamaDouble(pulled=["llama3.2"], load_seconds=30, ps_blocks_during_load=False) as o:
        t, _ = _client_thread(o.url + "/api/generate", {"model": "llama3.2", "stream": False})
        deadline = time.monotonic() + 10  # waiting for the test's own setup, not a bound
        while not o.loading() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert o.loading() == ["llama3.2:latest"]
        # Answered within the client's 5 s while the 30 s load is still in flight: not blocked.
        status, body = get_json(o, "/api/ps")
        assert o.loading() == ["llama3.2:latest"]
        assert status == 200 and [m["name"] for m in body["models"]] == ["llama3.2:latest"]
    t.join(3)  # stop() released the load
    assert not t.is_alive()


# ------------------------------------------------------------------ keep_alive
def test_keep_alive_duration_string_expires_on_the_injected_clock(o, clock):
    """keep_alive '30s' keeps the model 30 s of the injected clock, then it is evicted lazily."""
    load(o, "llama3.2", "30s")
    assert o.keep_alive_remaining("llama3.2") == pytest.approx(30)
    clock.advance(29)
    assert ps_names(o) == ["llama3.2:latest"]
    clock.advance(2)
    assert ps_names(o) == []
    assert o.resident() == []


def test_missing_keep_alive_defaults_to_five_minutes(o, clock):
    """A request without keep_alive (or with null) keeps the model 5 minutes."""
    load(o, "llama3.2")
    assert o.keep_alive_remaining("llama3.2") == pytest.approx(300)
    post_json(o, "/api/generate", {"model": "llama3.2", "prompt": "", "keep_alive": None})
    assert o.keep_alive_remaining("llama3.2") == pytest.approx(300)
    clock.advance(301)
    assert ps_names(o) == []


def test_numeric_keep_alive_is_seconds(o):
    """A numeric keep_alive is a number of seconds."""
    load(o, "llama3.2", 90)
    assert o.keep_alive_remaining("llama3.2") == pytest.approx(90)
    load(o, "llama3.2", 2.5)
    assert o.keep_alive_remaining("llama3.2") == pytest.approx(2.5)


@pytest.mark.parametrize("forever", [-1, -1.5, "-1m", "-1h"])
def test_negative_keep_alive_is_forever(o, clock, forever):
    """A negative keep_alive (number or duration string) keeps the model forever."""
    load(o, "llama3.2", forever)
    assert o.keep_alive_remaining("llama3.2") == math.inf
    clock.advance(10 * 365 * 86400)
    (row,) = get_json(o, "/api/ps")[1]["models"]
    assert datetime.fromisoformat(row["expires_at"]).year > 2200


def test_every_request_resets_the_expiry(o, clock):
    """Each generate/chat re-sets the model's keep_alive, counted from that request."""
    load(o, "llama3.2", "10s")
    clock.advance(8)
    status, _ = post_json(
        o, "/api/chat",
        {"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}],
         "stream": False, "keep_alive": "10s"},
    )
    assert status == 200
    clock.advance(8)  # 16 s after the load, 8 s after the chat
    assert ps_names(o) == ["llama3.2:latest"]
    load(o, "llama3.2", "1h")
    assert o.keep_alive_remaining("llama3.2") == pytest.approx(3600)
    load(o, "llama3.2")  # missing keep_alive re-sets to the 5 min default, too
    assert o.keep_alive_remaining("llama3.2") == pytest.approx(300)


def test_expires_at_reflects_keep_alive(o):
    """/api/ps expires_at is about now + keep_alive."""
    load(o, "llama3.2", "1h30m")
    (row,) = get_json(o, "/api/ps")[1]["models"]
    left = datetime.fromisoformat(row["expires_at"]) - datetime.now(timezone.utc)
    assert 5390 < left.total_seconds() <= 5400


def test_ps_orders_longest_remaining_first(o):
    """/api/ps lists the model with the most time left first."""
    load(o, "llama3.2", "1m")
    load(o, "qwen2.5:0.5b", "1h")
    assert ps_names(o) == ["qwen2.5:0.5b", "llama3.2:latest"]


def test_bad_keep_alive_string_is_400_with_go_message(o):
    """A unitless or unknown-unit keep_alive string is a 400 carrying Go's ParseDuration error."""
    status, body = load(o, "llama3.2", "30")
    assert (status, body) == (400, {"error": 'time: missing unit in duration "30"'})
    status, body = load(o, "llama3.2", "1d")
    assert (status, body) == (400, {"error": 'time: unknown unit "d" in duration "1d"'})
    assert o.resident() == []


@pytest.mark.parametrize(
    ("text", "ns"),
    [("5m", 300 * 10**9), ("1h30m", 5400 * 10**9), ("30s", 30 * 10**9), ("0", 0),
     ("1.5s", 1_500_000_000), ("250ms", 250_000_000), ("-1m", -60 * 10**9), ("+2h", 7200 * 10**9)],
)
def test_parse_go_duration(text, ns):
    """parse_go_duration follows Go's time.ParseDuration."""
    assert parse_go_duration(text) == ns


@pytest.mark.parametrize("bad", ["", "30", "1d", "m", ".s", "-"])
def test_parse_go_duration_rejects(bad):
    """parse_go_duration rejects what Go rejects."""
    with pytest.raises(KeepAliveError):
        parse_go_duration(bad)


def test_parse_keep_alive_semantics():
    """parse_keep_alive: None=default, number=seconds, negative=forever, bool/list rejected."""
    assert parse_keep_alive(None) == 300 * 10**9
    assert parse_keep_alive(None, default_ns=7) == 7
    assert parse_keep_alive(45) == 45 * 10**9
    assert parse_keep_alive(-1) == FOREVER_NS
    assert parse_keep_alive("-5s") == FOREVER_NS
    assert parse_keep_alive("0s") == 0
    for bad in (True, [1], {"s": 1}):
        with pytest.raises(KeepAliveError):
            parse_keep_alive(bad)


def test_canonical_name():
    """canonical_name adds ':latest' and drops the default registry host and namespace."""
    assert canonical_name("llama3.2") == "llama3.2:latest"
    assert canonical_name("qwen2.5:0.5b") == "qwen2.5:0.5b"
    assert canonical_name("registry.ollama.ai/library/llama3.2") == "llama3.2:latest"
    assert canonical_name("example/model") == "example/model:latest"
    assert canonical_name("localhost:5000/ns/model") == "localhost:5000/ns/model:latest"


# ----------------------------------------------------------- generate and chat
def test_generate_with_prompt_answers_hi_and_loads(o):
    """A non-empty prompt with stream false loads the model and answers 'hi', done_reason 'stop'."""
    status, body = post_json(
        o, "/api/generate", {"model": "qwen2.5:0.5b", "prompt": "hello", "stream": False}
    )
    assert status == 200
    assert (body["model"], body["response"], body["done"], body["done_reason"]) == (
        "qwen2.5:0.5b", "hi", True, "stop")
    assert body["eval_count"] == 1
    assert ps_names(o) == ["qwen2.5:0.5b"]
    assert o.loads == ["qwen2.5:0.5b"]


def test_generate_streams_ndjson_by_default(o):
    """Without stream false a prompt is answered as NDJSON, the last object done."""
    status, headers, raw = call(o.url + "/api/generate", "POST", {"model": "llama3.2", "prompt": "x"})
    assert status == 200 and headers["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in raw.splitlines()]
    assert [x["done"] for x in lines] == [False, True]
    assert "".join(x["response"] for x in lines) == "hi"
    assert lines[-1]["done_reason"] == "stop"


def test_prompt_with_keep_alive_zero_answers_then_unloads(o):
    """A prompt with keep_alive 0 is answered, and the model is gone from /api/ps afterwards."""
    status, body = post_json(
        o, "/api/generate", {"model": "llama3.2", "prompt": "x", "stream": False, "keep_alive": 0}
    )
    assert (status, body["response"]) == (200, "hi")
    assert ps_names(o) == []


def test_chat_deep_health_answers_assistant_message(o):
    """POST /api/chat with a user message answers an assistant message 'hi' and sets keep_alive."""
    status, body = post_json(
        o, "/api/chat",
        {"model": "llama3.2:latest", "messages": [{"role": "user", "content": "hi"}],
         "stream": False, "keep_alive": "20m", "options": {"num_predict": 1}},
    )
    assert status == 200
    assert body["message"] == {"role": "assistant", "content": "hi"}
    assert (body["done"], body["done_reason"], body["model"]) == (True, "stop", "llama3.2:latest")
    assert o.keep_alive_remaining("llama3.2") == pytest.approx(1200)


def test_chat_empty_messages_load_and_unload(o):
    """POST /api/chat with no messages loads ('load'); with keep_alive 0 it unloads ('unload')."""
    status, body = post_json(o, "/api/chat", {"model": "llama3.2", "messages": [], "stream": False})
    assert (status, body["done_reason"], body["message"]["content"]) == (200, "load", "")
    assert ps_names(o) == ["llama3.2:latest"]
    status, body = post_json(o, "/api/chat", {"model": "llama3.2", "messages": [], "keep_alive": 0})
    assert (status, body["done_reason"]) == (200, "unload")
    assert ps_names(o) == []


# ----------------------------------------------------------------------- errors
@pytest.mark.parametrize("path", ["/api/generate", "/api/chat"])
@pytest.mark.parametrize("keep_alive", [None, 0])
def test_unpulled_model_is_404_with_ollama_wording(o, path, keep_alive):
    """An unpulled model is a 404 {"error": "model 'x' not found"}, for load and unload alike."""
    body = {"model": "mistral", "prompt": "", "messages": [], "stream": False}
    if keep_alive is not None:
        body["keep_alive"] = keep_alive
    status, answer = post_json(o, path, body)
    assert (status, answer) == (404, {"error": "model 'mistral' not found"})
    assert o.loads == []


def test_missing_model_and_missing_body_are_400(o):
    """No model field is a 400 'model is required'; an empty body is a 400 'missing request body'."""
    assert post_json(o, "/api/generate", {"prompt": ""}) == (400, {"error": "model is required"})
    status, _, raw = call(o.url + "/api/generate", "POST")
    assert (status, json.loads(raw)) == (400, {"error": "missing request body"})


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("POST", "/api/pull", {"model": "llama3.2"}), ("DELETE", "/api/delete", {"model": "llama3.2"}),
     ("POST", "/api/show", {"model": "llama3.2"}), ("GET", "/v1/models", None)],
)
def test_unimplemented_paths_are_404_and_recorded(o, method, path, body):
    """Any other path answers 404 but is recorded, so tests can assert it was never called."""
    status, _, raw = call(o.url + path, method, body)
    assert (status, raw) == (404, b"404 page not found")
    assert o.requests[-1] == (method, path, body)
    assert o.pulled == ["llama3.2:latest", "qwen2.5:0.5b"]  # nothing pulled or deleted


def test_wrong_method_on_a_known_path_is_405(o):
    """A known path with the wrong method answers 405, like gin with HandleMethodNotAllowed."""
    assert call(o.url + "/api/generate")[0] == 405
    assert call(o.url + "/api/ps", "POST", {})[0] == 405


# --------------------------------------------------------------------- hooks
def test_requests_records_method_path_and_body(o):
    """o.requests records (method, path, json body) of every request, in order."""
    get_json(o, "/api/version")
    load(o, "llama3.2", "5m")
    assert o.requests == [
        ("GET", "/api/version", None),
        ("POST", "/api/generate",
         {"model": "llama3.2", "prompt": "", "stream": False, "keep_alive": "5m"}),
    ]
    o.clear_requests()
    assert o.requests == []


def test_evict_hook_removes_a_model_behind_the_clients_back(o):
    """o.evict(tag) drops a resident model; the next request loads it again."""
    load(o, "llama3.2", -1)
    assert o.evict("llama3.2") is True
    assert ps_names(o) == []
    assert o.evict("llama3.2") is False
    load(o, "llama3.2")
    assert o.loads == ["llama3.2:latest", "llama3.2:latest"]


def test_pulled_hooks(o):
    """o.add_pulled / o.remove_pulled change what /api/tags lists and what can load."""
    o.add_pulled("mistral")
    assert "mistral:latest" in o.pulled
    assert load(o, "mistral")[0] == 200
    o.remove_pulled("mistral:latest")
    assert "mistral:latest" not in [m["name"] for m in get_json(o, "/api/tags")[1]["models"]]
    assert load(o, "mistral")[0] == 404


# ------------------------------------------------------------------ lifecycle
def test_binds_loopback_on_the_given_port_and_shuts_down():
    """A given port is used on 127.0.0.1, and after the with-block nothing listens there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with OllamaDouble(port=port) as o:
        assert (o.port, o.url) == (port, f"http://127.0.0.1:{port}")
        assert call(o.url + "/")[0] == 200
    with pytest.raises(urllib.error.URLError):
        call(f"http://127.0.0.1:{port}/", timeout=1)


def _client_thread(url: str, body: object = None) -> tuple[threading.Thread, list]:
    """Start one request in a thread; what it saw is appended: the status, the name of
    the OSError of a dropped connection, or (a bug) the repr of anything else. Nothing
    escapes the thread (pytest would report an escaped exception only at teardown)."""
    outcome: list = []

    def client() -> None:
        try:
            outcome.append(call(url, "GET" if body is None else "POST", body, timeout=5)[0])
        except OSError as e:  # the server dropped the connection before any byte of its answer
            outcome.append(type(e).__name__)
        except Exception as e:  # e.g. IncompleteRead: half an answer
            outcome.append(repr(e))

    t = threading.Thread(target=client, daemon=True)
    t.start()
    return t, outcome


def test_stop_releases_a_blocked_ps_and_is_prompt():
    """Stopping during a long load returns promptly and the waiting client is not left hanging."""
    load_seconds = 30
    o = OllamaDouble(pulled=["llama3.2"], load_seconds=load_seconds).start()
    try:
        t, outcome = _client_thread(o.url + "/api/generate", {"model": "llama3.2"})
        deadline = time.monotonic() + 10  # waiting for the test's own setup, not a bound
        while not o.loading() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert o.loading() == ["llama3.2:latest"]
        t0 = time.monotonic()
    finally:
        o.stop()
    # "Promptly" = without waiting for the load: 2 s is 1/15 of load_seconds; stop()
    # measured <= 0.16 s beside two CPU burners (load average ~6 on 2 cores).
    assert time.monotonic() - t0 < load_seconds / 15
    t.join(3)  # under the client's 5 s timeout: a client left waiting fails here
    assert not t.is_alive()
    # The 500 "server shutting down", or a connection dropped before any byte of it.
    assert outcome in ([500], ["RemoteDisconnected"], ["ConnectionResetError"])


def test_stop_drops_a_connection_before_or_after_an_answer_never_inside_it(monkeypatch):
    """stop() while an answer is being written: the client gets all of it or none of it.

    Pins the interleaving behind a flaky failure: the double wrote the status line and
    headers in one write and the body in a second, and stop() shut the connection in
    between; the client got "Content-Length: 32" and no body (IncompleteRead, an
    exception no OSError handler catches). A real Ollama (Go's buffered ResponseWriter)
    sends a small answer in one write.
    """
    headers_written, stopped = threading.Event(), threading.Event()
    flush_headers = ollama._Handler.flush_headers

    def flush_headers_then_wait_for_stop(self) -> None:
        flush_headers(self)
        headers_written.set()
        stopped.wait(5)

    monkeypatch.setattr(ollama._Handler, "flush_headers", flush_headers_then_wait_for_stop)
    o = OllamaDouble().start()
    try:
        t, outcome = _client_thread(o.url + "/api/version")
        assert headers_written.wait(5)
    finally:
        o.stop()
        stopped.set()
    t.join(5)
    assert not t.is_alive()
    assert outcome in ([200], ["RemoteDisconnected"], ["ConnectionResetError"])
