"""The status page's rendering (report/page.py): every value escaped, bars as wide as the ledger."""

from __future__ import annotations

import html
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.planner.memoryview import Holding, MemoryBar
from reconciler.report import page
from reconciler.report.snapshot import Snapshot

EVIL = "<script>alert(1)</script>"


def _row(name: str, **extra) -> dict:
    row = {"role": name, "runtime": "llamacpp", "mode": "managed", "status": "running",
           "detail": "serving tiny", "pid": 4242, "port": 8090, "restarts": 0,
           "reserved_bytes": 2**30, "footprint_bytes": 2**30, "next": None, "exit": None,
           "plan": f"= keep {name} :8090 (in sync)", "git_commit": "abcdef0123456789",
           "on_demand": False, "demand": None}
    row.update(extra)
    return row


def _snapshot(**extra) -> Snapshot:
    values = dict(
        node="n1", git_commit="0123456789abcdef", taken_at=1_780_000_000.0,
        rows=(_row("coder"), _row(EVIL, status="backoff",
                                  exit={"summary": f"exited (code 1): {EVIL}", "log": [EVIL]}),
              _row("chat", on_demand=True, demand={"waiting": 2, "in_flight": 1,
                                                  "last_request": 1_780_000_000.0})),
        bars=(MemoryBar(budget=10 * 2**30, holdings=(
            Holding(role="coder", held=3 * 2**30, observed=2**30),
            Holding(role=EVIL, held=2 * 2**30),
            Holding(role="chat", held=2**30, evictable=True))),),
        events=({"id": 1, "at": 1_780_000_000.0, "role": EVIL, "verb": "start",
                 "reason": "missing", "detail": EVIL, "ok": False, "git_commit": None},
                {"id": 2, "at": 1_780_000_001.0, "role": "coder", "verb": "start",
                 "reason": "missing", "detail": "", "ok": True, "git_commit": "ff"}),
        version=3)
    values.update(extra)
    return Snapshot(**values)


def test_untrusted_text_is_escaped_everywhere() -> None:
    """A role name, an exit reason, an event and a log line holding <script> are text."""
    out = page.render(_snapshot(), log_role=EVIL, log_lines=(f"log {EVIL}",))
    assert "<script>alert" not in out
    assert out.count(html.escape(EVIL, quote=False)) + out.count(html.escape(EVIL)) >= 6
    scripts = re.findall(r"<script\b[^>]*>", out)
    assert scripts == ['<script src="/status/page.js" defer>'], scripts
    assert "log &lt;script&gt;" in out


def test_no_inline_script_or_style_attribute_so_the_csp_holds() -> None:
    """§11 the page has no inline script, no ``style=``/``on*=`` attribute, and its one style block
    is the hash the CSP allows."""
    out = page.render(_snapshot())
    assert not re.search(r"\sstyle=", out)
    assert not re.search(r"\son[a-z]+=", out)
    assert "<script>" not in out
    (style,) = re.findall(r"<style>(.*?)</style>", out, re.S)
    assert style == page.STYLE  # the hash in the CSP is of exactly this text
    assert f"'sha256-{page._digest(style)}'" in page.csp()
    assert "script-src 'self'" in page.csp() and "unsafe-inline" not in page.csp()


def test_the_bars_widths_are_the_ledgers_shares_of_the_budget() -> None:
    """§7/§11 each bar segment's width is the role's share of the budget; evictable roles and
    observed use are drawn as such."""
    out = page.render(_snapshot())
    widths = {html.unescape(m[0]): (int(m[1]), float(m[2])) for m in re.findall(
        r'<rect class="seg[^"]*" data-role="([^"]*)" data-held="(\d+)" x="[\d.]+" y="2" '
        r'width="([\d.]+)"', out)}
    assert widths == {"coder": (3 * 2**30, 300.0), EVIL: (2 * 2**30, 200.0),
                      "chat": (2**30, 100.0)}
    assert re.search(r'<line class="budget" x1="1000.000"', out)
    assert 'class="seg evictable" data-role="chat"' in out
    assert re.search(r'<rect class="observed" data-role="coder" x="0.000" y="18" '
                     r'width="100.000"', out)


def test_a_ledger_over_its_budget_scales_to_what_is_held() -> None:
    """§11 a ledger over its budget is scaled to what is held (the budget line inside the bar); with
    no budget the bar is what is held."""
    bar = page.draw(MemoryBar(budget=100, holdings=(Holding(role="a", held=150),
                                                    Holding(role="b", held=50))))
    assert [(s.x, s.width) for s in bar.segments] == [(0.0, 750.0), (750.0, 250.0)]
    assert bar.budget_x == 500.0
    none = page.draw(MemoryBar(budget=None, holdings=(Holding(role="a", held=10),)))
    assert none.budget_x is None and none.segments[0].width == 1000.0


def test_every_role_and_status_is_shown_and_events_filter_by_role() -> None:
    """§11 every role is shown with its status (names escaped); the events filter by role; demand
    and the starting commit are shown."""
    out = page.render(_snapshot(), role_filter="coder")
    for name, status in (("coder", "running"), (html.escape(EVIL), "backoff"),
                         ("chat", "running")):
        assert f'data-role="{name}" data-status="{status}"' in out
    events = re.findall(r'<tr class="event[^"]*" data-role="([^"]*)"', out)
    assert events == ["coder"]
    assert "2 waiting, 1 in flight" in out
    assert "abcdef0123" in out  # the commit that started it


def test_invalid_manifests_are_shown_first() -> None:
    """§11 invalid manifests are shown first, escaped, above the last recorded state."""
    out = page.render(_snapshot(problems=("m.yaml:3: $.spec: bad <b>",)))
    assert out.index("manifests invalid: showing the last recorded state") < out.index(
        'id="roles"')
    assert "bad &lt;b&gt;" in out


def test_the_file_page_has_no_script_and_no_reload() -> None:
    """§11 ``status --html FILE`` has no script and no reload; the live page reloads itself without
    JavaScript."""
    out = page.render(_snapshot(), live=False)
    assert "<script" not in out and "refresh" not in out
    live = page.render(_snapshot())
    assert '<noscript><meta http-equiv="refresh"' in live  # without JS it reloads itself


@settings(max_examples=50, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(min_size=1, max_size=40))
def test_no_text_can_add_markup(text: str) -> None:
    """Whatever a role name, detail, exit reason, event or log line holds, the page has exactly
    the tags, quotes and ampersand entities of the page with plain text in their place."""
    def page_of(value: str) -> str:
        snapshot = _snapshot(
            rows=(_row(value, detail=value, exit={"summary": value, "log": [value]}),),
            bars=(MemoryBar(budget=10, holdings=(Holding(role=value, held=5),)),),
            events=({"id": 1, "at": 1.0, "role": value, "verb": "start", "reason": value,
                     "detail": value, "ok": False, "git_commit": value},),
            problems=(value,))
        return page.render(snapshot, role_filter=value, log_role=value, log_lines=(value,))

    def shape(html_text: str) -> tuple[int, ...]:
        return tuple(html_text.count(c) for c in '<>"\'')

    assert shape(page_of(text)) == shape(page_of("plain"))


def test_a_fetch_on_its_way_is_drawn_as_its_share_of_bytes() -> None:
    """§1.6 on the page: a Model being fetched is a bar as long as its bytes in the cache;
    a done one is not drawn; its name and failure are text, escaped."""
    from reconciler.core.observed import FetchObservation, FetchState
    from reconciler.report.snapshot import fetch_rows

    class Seen:
        fetches = (FetchObservation(model="qwen", generation="g", state=FetchState.RUNNING,
                                    total=4000, missing=1000, rate=2.0e6),
                   FetchObservation(model="done", generation="g", state=FetchState.DONE,
                                    total=10, missing=0),
                   FetchObservation(model=EVIL, generation="g", state=FetchState.FAILED,
                                    total=10, missing=10, detail=EVIL))

    out = page.render(_snapshot(fetches=fetch_rows(Seen)))
    drawn = dict(re.findall(r'<figure class="bar fetch" data-model="([^"]*)"[^>]*>.*?'
                            r'<rect class="fetched" x="0" y="1" width="([\d.]+)"', out, re.S))
    assert {html.unescape(k) for k in drawn} == {"qwen", EVIL}
    assert float(drawn["qwen"]) == page.BAR_UNITS * 3000 / 4000
    assert EVIL not in out and html.escape(EVIL) in out


#: A document with just what page.js touches, recording every way HTML could be written.
_FAKE_DOM = r"""
const sinks = [], sources = [];
function element(id, value) {
  const el = {id, value, children: [], listeners: {}, textContent: "", scrollTop: 0,
              scrollHeight: 0, classList: {toggle() {}},
              appendChild(n) { this.children.push(n); },
              addEventListener(kind, f) { this.listeners[kind] = f; },
              insertAdjacentHTML(_, html) { sinks.push(["insertAdjacentHTML", html]); },
              getAttribute() { return null; }};
  for (const name of ["innerHTML", "outerHTML"]) {
    Object.defineProperty(el, name, {set(html) { sinks.push([name, html]); },
                                     get() { return ""; }});
  }
  return el;
}
const els = {"log-role": element("log-role", "chat"), "log-lines": element("log-lines"),
             "log-state": element("log-state")};
class FakeSource {
  constructor(url) { this.url = url; this.listeners = {}; sources.push(this); }
  addEventListener(kind, f) { this.listeners[kind] = f; }
  close() {}
}
globalThis.window = {EventSource: FakeSource};
globalThis.EventSource = FakeSource;
globalThis.document = {
  getElementById: (id) => els[id] || null,
  querySelectorAll: () => [],
  createTextNode: (text) => ({text}),
  write: (html) => sinks.push(["document.write", html]),
};
require("vm").runInThisContext(require("fs").readFileSync(process.argv[2], "utf8"));
for (const line of process.argv.slice(3)) sources[0].listeners.line({data: line});
console.log(JSON.stringify({url: sources[0].url, lines: els["log-lines"].children, sinks}));
"""


def test_the_followed_log_is_text_never_html(tmp_path) -> None:
    """§11 the followed server log is text, never HTML: each line a followed log sends (a server
    writes what it likes) is appended to the page as a text node, through no HTML sink
    (runs page.js in node with a recording document; the browser test does it for real)."""
    import json
    import shutil
    import subprocess

    node = shutil.which("node")
    # Not a skip: `make tools` and .ci/run install node, so a missing one is a broken setup.
    assert node is not None, "node is not installed: run `make tools` (Debian's nodejs)"
    (tmp_path / "dom.js").write_text(_FAKE_DOM)
    (tmp_path / "page.js").write_text(page.SCRIPT)
    lines = ["plain", '<img src=x onerror="alert(1)">', EVIL]
    done = subprocess.run([node, str(tmp_path / "dom.js"), str(tmp_path / "page.js"), *lines],
                          capture_output=True, text=True, timeout=30, check=True)
    got = json.loads(done.stdout)
    assert got["url"] == "/status/logs?role=chat"
    assert got["sinks"] == []
    assert got["lines"] == [{"text": f"{line}\n"} for line in lines]


def test_each_role_shows_the_program_it_runs() -> None:
    """§14/§11 the page shows a role's Program as name@version (escaped), nothing for a
    role on a path."""
    rows = (_row("coder", program={"name": "llama-b11434", "version": "b11434",
                                   "sha256": "a" * 64}),
            _row("chat", program={"name": EVIL, "version": "b1", "sha256": "b" * 64}),
            _row("plain", program=None))
    out = page.render(_snapshot(rows=rows))
    assert '<div class="program muted">llama-b11434@b11434</div>' in out
    assert f"{html.escape(EVIL, quote=False)}@b1" in out and "<script>alert" not in out
    assert out.count('class="program muted"') == 2
