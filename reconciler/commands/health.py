"""``reconcile health NAME [--deep]`` (SHELL; ``capabilities`` is ``commands/capabilities.py``).

``health`` observes one role exactly as a pass would and prints the whole
probe report; exit 0 when the role is up, 1 otherwise. ``--deep`` then asks
the server for one token (BEHAVIOUR §2) with ``deep_timeout``: an explicit
operator request, so it is sent to adopted roles too — but never to a port
outside ``allowed_ports``. Exit 0 pass, 1 fail with the reason.
"""

from __future__ import annotations

import os
import sys

import attrs

from reconciler.commands import common
from reconciler.commands.options import GlobalOptions
from reconciler.core.exitcodes import Exit
from reconciler.core.desired import Desired, RoleSpec
from reconciler.core.observed import Health, Remembered
from reconciler.runtimes import spec_of
from reconciler.runtimes.common import (
    DeepResult,
    ProbeRequest,
    deep_verdict,
    probe_status,
)
from reconciler.repo.sources import load_desired
from reconciler.world import probe
from reconciler.world.observe import observe


@attrs.frozen(kw_only=True)
class HealthOptions:
    name: str
    deep: bool = False
    json: bool = False


def _load(g: GlobalOptions) -> Desired | None:
    result = load_desired(common.manifest_paths(g), node=common.node_choice(g))
    if result.problems or result.desired is None:
        common.report_problems(result.problems)
        return None
    return result.desired


def _remembered(g: GlobalOptions, name: str) -> Remembered:
    """The store's record of the role, when a store exists (never created here)."""
    state = common.state_dir(g)
    if not os.path.exists(os.path.join(state, "state.db")):
        return Remembered()
    with common.open_store(g) as store:
        record = store.role(name)
    return Remembered(roles=(record,) if record is not None else ())


def deep_request(spec: RoleSpec, desired: Desired, listed: tuple[str, ...] = ()) -> ProbeRequest | str:
    """The §2 deep health request for a role, or why there is none.

    ``listed``: the model names the server listed when it was observed (an
    OpenAI-compatible server is asked for the listed id the role's model matches).
    """
    build = spec_of(spec.runtime).deep_request
    return build(spec, desired.model(spec.model), desired.node, listed)


def deep_check(spec: RoleSpec, desired: Desired, listed: tuple[str, ...] = ()) -> DeepResult:
    if not desired.node.port_allowed(spec.serve.port):
        return DeepResult(
            ok=False,
            detail=f"port {spec.serve.port} is outside allowed_ports "
            f"{desired.node.allowed_ports}: not probed",
        )
    request = deep_request(spec, desired, listed)
    if isinstance(request, str):
        return DeepResult(ok=False, detail=request)
    answer = probe.send_sync(
        spec.serve.host, spec.serve.port, request, timeout=desired.node.deep_timeout,
        key=probe.api_key(spec.serve.api_key_file),
    )
    return deep_verdict(request, answer)


def health_report(spec: RoleSpec, desired: Desired, remembered: Remembered, deep: bool) -> dict:
    only = Desired(roles=(spec,), models=desired.models, node=desired.node)
    observed = observe(only, remembered)
    obs = observed.role(spec.name)
    facts = obs.probe
    status, detail = probe_status(facts)
    report: dict = {
        "role": spec.name,
        "runtime": str(spec.runtime),
        "mode": str(spec.mode),
        "endpoint": spec.serve.address,
        "health": str(facts.health) if facts else None,
        "status": str(status),
        "detail": detail,
        "listed_models": list(facts.listed_models) if facts else [],
        "resident_models": list(facts.resident_models) if facts else [],
        "identity": facts.identity if facts else None,
        "version": facts.version if facts else None,
        "latency_s": round(facts.latency, 4) if facts and facts.latency is not None else None,
        "pid": obs.process.pid if obs.process else None,
        "owned": obs.process.owned if obs.process else None,
        "listen": list(obs.process.listen) if obs.process else [],
        "exposed": list(obs.exposed),
        "port_taken": obs.port_taken,
        "ok": bool(facts and facts.health is Health.UP),
    }
    if deep:
        result = deep_check(spec, desired, facts.listed_models if facts else ())
        report["deep"] = {"ok": result.ok, "detail": result.detail}
        report["ok"] = result.ok
    return report


def _print_report(report: dict) -> None:
    lines = [
        ("role", f"{report['role']} ({report['runtime']}, {report['mode']}) at {report['endpoint']}"),
        ("status", f"{report['status']}: {report['detail']}"),
        ("health", report["health"]),
        ("latency", f"{report['latency_s']}s" if report["latency_s"] is not None else "-"),
        ("listed", ", ".join(report["listed_models"]) or "-"),
        ("resident", ", ".join(report["resident_models"]) or "-"),
        ("identity", report["identity"] or "-"),
        ("version", report["version"] or "-"),
        ("process", f"pid {report['pid']} ({'owned' if report['owned'] else 'not owned'})"
         if report["pid"] else "-"),
        ("listening", ", ".join(report["listen"]) or "-"),
        ("exposed", ", ".join(report["exposed"]) or "no"),
        ("port taken", "yes (not by our process)" if report["port_taken"] else "no"),
    ]
    if "deep" in report:
        verdict = "pass" if report["deep"]["ok"] else "FAIL"
        lines.append(("deep", f"{verdict}: {report['deep']['detail']}"))
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        print(f"{key.ljust(width)}  {value}")


def run_health(g: GlobalOptions, o: HealthOptions) -> int:
    desired = _load(g)
    if desired is None:
        return Exit.ERROR
    spec = desired.role(o.name)
    if spec is None:
        print(f"reconcile: error: no role {o.name!r} in the manifests", file=sys.stderr)
        return Exit.ERROR
    report = health_report(spec, desired, _remembered(g, spec.name), o.deep)
    if o.json:
        common.print_json(report)
    else:
        _print_report(report)
    return Exit.OK if report["ok"] else Exit.ERROR
