"""§13 the Prometheus gate: one instant query to the fleet's Prometheus (SHELL).

``PrometheusAsk.ask`` sends ``GET <url>/api/v1/query?query=…`` (the PromQL of
``rolloutgate.query``) and reads the answer with ``rolloutgate.read``. It never
raises for the server's sake: a refused connection, a timeout, a redirect, a
body that is not JSON are all a ``GateAnswer`` that holds, with the reason.
Redirects are not followed and no proxy variable is read (§2's hygiene for a
request the reconciler makes on its own); the answer is capped at 4 MiB.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Sequence

from reconciler.core.rollouts import Rollout
from reconciler.planner import rolloutgate
from reconciler.planner.rollout import GateAnswer

MAX_ANSWER = 4 * 1024 * 1024


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102
        return None  # a 3xx is an answer like any other


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


class PrometheusAsk:
    """The ``Gate`` of a Rollout's ``gate.prometheus``."""

    def __init__(self, *, timeout: float = 5.0) -> None:
        self.timeout = timeout

    def ask(self, rollout: Rollout, wave: str, *, revision: str,
            nodes: Sequence[str]) -> GateAnswer:
        gate = rollout.gate
        if gate is None:
            return GateAnswer(open=True, reason="no gate")
        promql = rolloutgate.query(gate, wave, revision=revision, nodes=nodes)
        return self.instant(gate.url, promql)

    def instant(self, url: str, promql: str) -> GateAnswer:
        """One instant query, read as a gate's answer."""
        target = f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        request = urllib.request.Request(target, headers={"Accept": "application/json",
                                                          "User-Agent": "reconciler-gate"})
        try:
            with _OPENER.open(request, timeout=self.timeout) as response:
                status, raw = response.status, response.read(MAX_ANSWER + 1)
        except urllib.error.HTTPError as err:  # 4xx/5xx: Prometheus says why in JSON
            status, raw = err.code, err.read(MAX_ANSWER + 1)
        except (OSError, ValueError) as err:  # refused, timed out, DNS, a malformed URL
            return rolloutgate.read(None, None, error=str(getattr(err, "reason", err)))
        if len(raw) > MAX_ANSWER:
            return GateAnswer(open=None, reason="Prometheus' answer is over 4 MiB")
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        return rolloutgate.read(status, body)
