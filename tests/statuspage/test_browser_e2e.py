"""The status page of a live ``reconcile watch``, in a real browser (§11).

Debian's ``chromium`` and ``chromium-driver`` (``/usr/bin/chromedriver``),
driven headless by ``selenium``; nothing is downloaded. The page of a daemon
with real llama-servers (the testbed's tiny model), served on the router's
port: every role and its status; a killed server changes its row without a
reload (pushed by the daemon's publish); the memory bars' widths are the
ledger of ``reconcile plan --json``; a role name and a log line holding
``<script>`` are text; broken manifests show their problems over the last
good state. Screenshots go to pytest's ``tmp_path`` (the path is printed);
``RECONCILER_DOCS_SCREENSHOT=1`` also writes ``docs/status-page.png``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import free_port, http_get, wait_for, world  # noqa: F401  (a fixture)
from tests.watch.test_watch_e2e import WatchDaemon, ready

pytestmark = pytest.mark.e2e

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
EVIL = "<script>window.__pwned = 1</script>"
DOCS_PNG = Path(__file__).parents[2] / "docs" / "status-page.png"


def _browser_or_skip() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if not missing:
        return
    message = (f"no browser for the status page tests: {', '.join(missing)} missing "
               "(apt-get install chromium chromium-driver; .ci/run does)")
    if os.environ.get("CI"):
        pytest.fail(message)  # CI installs them: missing there is a broken build
    pytest.skip(reason=message)


def _chrome(profile: Path, *, javascript: bool = True):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1400,1500",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    if not javascript:
        options.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(20)
    return driver


@pytest.fixture
def browser(tmp_path):
    _browser_or_skip()
    driver = _chrome(tmp_path / "chromium-profile")
    try:
        yield driver
    finally:
        driver.quit()


def _until(driver, predicate, timeout: float = 20.0, message: str = ""):
    """Wait for ``predicate``; an element gone stale meanwhile (a pass's publish swaps the
    live part of the page, §11) is looked for again, not a failure."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1,
                         ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: predicate(d), message)


def _select(driver, element_id: str, value: str) -> None:
    """Choose ``value`` in a select that a live update may replace while we do."""
    from selenium.webdriver.support.ui import Select

    def choose(d) -> bool:
        Select(d.find_element("id", element_id)).select_by_value(value)
        return True

    _until(driver, choose, timeout=10, message=f"could not choose {value} in #{element_id}")


def _rows(driver) -> dict[str, str]:
    return driver.execute_script(
        "var out = {}; document.querySelectorAll('#roles tr.role').forEach(function (tr) {"
        " out[tr.getAttribute('data-role')] = tr.getAttribute('data-status'); }); return out;")


def _shot(driver, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def test_the_page_of_a_live_daemon_in_a_real_browser(world, browser, tmp_path):  # noqa: F811
    """§11 a live daemon's page in a real browser: every role with its status, and the memory
    bars drawn to the ledger's shares of the budget that ``plan --json`` reports."""
    router = free_port()
    world.node(budget="1GiB", extra=f"  router: {{listen: \"127.0.0.1:{router}\"}}")
    world.model()
    coder, chat = free_port(), free_port()
    world.role("coder", coder, memory="memory: {kv: 96MiB}")
    world.role("chat", chat, memory="memory: {kv: 32MiB}")
    world.role("lazy", free_port(), state="on-demand", memory="memory: {kv: 64MiB}")
    daemon = WatchDaemon(world, "--log-format", "json")
    try:
        assert ready(coder) and ready(chat), daemon.log
        assert wait_for(lambda: http_get(router, "/")[0] == 200, 15), daemon.log
        browser.get(f"http://127.0.0.1:{router}/")

        # Every role and its status.
        rows = _until(browser, lambda d: (r := _rows(d)).get("coder") == "running"
                      and r.get("chat") == "running" and r, message="roles not running")
        assert set(rows) == {"coder", "chat", "lazy"}, rows
        assert rows["lazy"] == "stopped", rows
        print(f"browser saw roles: {rows}")
        browser.execute_script("window.__sameDocument = 42;")

        # A request for the on-demand role starts it: it then holds memory, evictable.
        status, _ = _post(router, "/v1/chat/completions", {
            "model": "lazy", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
        assert status == 200, daemon.log
        _until(browser, lambda d: _rows(d).get("lazy") == "running", timeout=20,
               message="the on-demand role's row never showed it running")

        # The bars are the ledger of `reconcile plan --json`.
        plan = world.reconcile("plan", "--json")
        assert plan.returncode == 0, plan.stderr
        ledger = json.loads(plan.stdout)["ledger"]
        bars = browser.execute_script(
            "var out = {}; document.querySelectorAll('#memory rect.seg').forEach(function (r) {"
            " out[r.getAttribute('data-role')] = [Number(r.getAttribute('data-held')),"
            " r.width.baseVal.value, r.getBoundingClientRect().width,"
            " r.classList.contains('evictable')]; });"
            "var svg = document.querySelector('#memory figure.bar > svg');"
            "return {segs: out, full: svg.getBoundingClientRect().width,"
            " budget: document.querySelector('#memory figure.bar').getAttribute('data-budget')};")
        scale = max(ledger["budget"] or 0, ledger["held"], 1)
        assert {r["role"]: (r["held"], r["evictable"]) for r in ledger["roles"]} == {
            role: (held, evictable) for role, (held, _, _, evictable) in bars["segs"].items()
        }, (ledger, bars)
        assert set(bars["segs"]) == {"coder", "chat", "lazy"} and bars["segs"]["lazy"][3]
        assert int(bars["budget"]) == ledger["budget"] == 2**30
        for role, (held, units, pixels, _) in bars["segs"].items():
            assert units == pytest.approx(held / scale * 1000, abs=0.01), role
            assert pixels == pytest.approx(held / scale * bars["full"], abs=1.0), role
        print(f"browser saw bars (px of {bars['full']:.0f}): "
              + ", ".join(f"{r} {p:.1f}px = {h} B{' (evictable)' if e else ''}"
                        for r, (h, _, p, e) in bars["segs"].items())
              + f"; plan --json ledger: {ledger}")

        # A log line holding <script> is text, followed live.
        _select(browser, "log-role", "chat")
        log = Path(world.record("chat").instance_id)
        where = world.state / "instances" / log / "server.log"
        _until(browser, lambda d: "following" in d.find_element("id", "log-state").text)
        with open(where, "a") as f:
            f.write(f"a line with {EVIL} in it\n")
        _until(browser, lambda d: EVIL in d.find_element("id", "log-lines").text,
               message="the appended log line never showed")
        assert browser.execute_script("return window.__pwned") is None
        assert not browser.find_elements("css selector", "#log-lines script")

        # A role name holding <script> (an event in the store) is text too.
        from reconciler.core.events import Event, EventKind

        with world.store() as store:
            store.add_event(Event(role=EVIL, kind=EventKind.KEEP, reason="test",
                                  detail=f"detail {EVIL}", at=time.time()))
        daemon.proc.send_signal(signal.SIGHUP)  # a pass: its publish pushes the new page
        _until(browser, lambda d: any(EVIL == c.text for c in d.find_elements(
            "css selector", "#events tr.event td:nth-child(2)")), message="no evil event")
        assert browser.execute_script("return window.__pwned") is None
        assert not browser.find_elements("css selector", "#live script")
        _shot(browser, tmp_path, "status-page")
        if os.environ.get("RECONCILER_DOCS_SCREENSHOT"):
            shutil.copy(tmp_path / "status-page.png", DOCS_PNG)

        # The events filter keeps one role's lines.
        _select(browser, "event-role", "coder")
        shown = lambda d: {tr.get_attribute("data-role") for tr in d.find_elements(  # noqa: E731
            "css selector", "#events tr.event") if tr.is_displayed()}
        _until(browser, lambda d: shown(d) == {"coder"}, timeout=10,
               message="the role filter did not keep coder's events only")

        # Killing a server changes its row without a reload; its log is followed across
        # the restart (the new server's lines follow the old one's).
        _select(browser, "log-role", "coder")
        listening = f"listening on http://127.0.0.1:{coder}"
        _until(browser, lambda d: d.find_element("id", "log-lines").text.count(listening) == 1,
               message="coder's log never showed its first run")
        pid = world.pid("coder")
        os.kill(pid, signal.SIGKILL)
        seen = _until(browser, lambda d: (s := _rows(d).get("coder")) != "running" and s,
                      timeout=15, message="the killed server's row never changed")
        assert browser.execute_script("return window.__sameDocument") == 42  # no reload
        print(f"browser saw coder go from running to {seen} after kill -9 of {pid}, no reload")
        _shot(browser, tmp_path, "after-kill")
        _until(browser, lambda d: _rows(d).get("coder") == "running", timeout=30,
               message="coder never came back")
        _until(browser, lambda d: d.find_element("id", "log-lines").text.count(listening) == 2,
               timeout=15, message="the restarted server's log lines never followed")
        print("browser followed coder's server.log across its restart (2 runs' lines)")

        # Broken manifests: the problems first, over the last good state.
        world.write("role-coder.yaml", (world.manifests / "role-coder.yaml").read_text()
                    .replace("ctx: 512", f"ctx: \"{EVIL}\""))
        _until(browser, lambda d: d.find_elements("id", "problems"), timeout=15,
               message="no problems section")
        problems = _until(browser, lambda d: d.find_element("id", "problems").text, timeout=10)
        assert "manifests invalid: showing the last recorded state" in problems
        assert "role-coder.yaml" in problems
        assert set(_rows(browser)) == {"coder", "chat", "lazy"}
        assert browser.execute_script("return window.__sameDocument") == 42
        print(f"browser saw the problems: {problems!r}")
        _shot(browser, tmp_path, "invalid-manifests")

        # `reconcile status` on the broken set: problems, then what runs; exit 1; --html too.
        page_file = tmp_path / "status.html"
        status = world.reconcile("status", "--html", str(page_file))
        assert status.returncode == 1, status
        assert "role-coder.yaml" in status.stderr
        assert "manifests invalid: showing the last recorded state" in status.stderr
        assert "chat" in status.stdout and "running" in status.stdout, status.stdout
        written = page_file.read_text()
        assert "manifests invalid: showing the last recorded state" in written
        assert 'data-role="chat" data-status="running"' in written
        print(f"status on broken manifests (exit 1):\n{status.stdout}")

        # Nothing the page does is refused by its Content-Security-Policy.
        console = [(e["level"], e["message"]) for e in browser.get_log("browser")
                   if "favicon.ico" not in e["message"]]
        assert not [m for _, m in console if "Content Security Policy" in m], console
        assert not [m for level, m in console if level == "SEVERE"], console
        print(f"browser console: {len(console)} message(s) besides the favicon, no CSP refusal")

        # Without JavaScript: a plain page that reloads itself; the forms filter and show a log.
        plain = _chrome(tmp_path / "chromium-nojs", javascript=False)
        try:
            plain.get(f"http://127.0.0.1:{router}/?role=chat&log=chat")
            assert {tr.get_attribute("data-role") for tr in plain.find_elements(
                "css selector", "#roles tr.role")} == {"coder", "chat", "lazy"}
            assert {tr.get_attribute("data-role") for tr in plain.find_elements(
                "css selector", "#events tr.event")} == {"chat"}
            assert EVIL in plain.find_element("id", "log-lines").text
            assert plain.find_element("id", "log-state").text == ""  # no script ran
            assert plain.find_elements("css selector", 'noscript')
            _shot(plain, tmp_path, "without-javascript")
        finally:
            plain.quit()
    finally:
        daemon.kill()


def test_the_page_on_its_own_port_with_a_key(world, tmp_path):  # noqa: F811
    """No router: ``status_page.listen`` serves it; the key, CSP and nosniff apply."""
    import base64
    import urllib.request

    port = free_port()
    key = world.root / "page.key"
    key.write_text("s3cret\n")
    world.node(extra=f"  status_page: {{listen: \"127.0.0.1:{port}\", api_key_file: {key}}}")
    world.model()
    role = free_port()
    world.role("coder", role)
    daemon = WatchDaemon(world, "--log-format", "json")
    try:
        assert ready(role), daemon.log
        assert wait_for(lambda: http_get(port, "/")[0] == 401, 15), daemon.log
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        auth = "Basic " + base64.b64encode(b"any:s3cret").decode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/",
                                         headers={"Authorization": auth})
        page = _until_page(opener, request, 'data-role="coder" data-status="running"')
        headers, body = page
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert "script-src 'self'" in headers["Content-Security-Policy"]
        assert "unsafe-inline" not in headers["Content-Security-Policy"]
        script = opener.open(urllib.request.Request(
            f"http://127.0.0.1:{port}/status/page.js",
            headers={"Authorization": "Bearer s3cret"}), timeout=5)
        assert script.headers["Content-Type"].startswith("text/javascript")
    finally:
        daemon.kill()


def _post(port: int, path: str, body: dict) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with opener.open(request, timeout=60) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _until_page(opener, request, needle: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    body = ""
    while time.monotonic() < deadline:
        with opener.open(request, timeout=5) as answer:
            body = answer.read().decode()
            if needle in body:
                return answer.headers, body
        time.sleep(0.2)
    raise AssertionError(f"{needle!r} never in the page:\n{body[:2000]}")
