"""``reconcile health NAME [--deep]`` and ``reconcile capabilities`` (SHELL).

``health`` observes one role exactly as a pass would and prints the whole
probe report; exit 0 when the role is up, 1 otherwise. ``--deep`` then asks
the server for one token (BEHAVIOUR §2) with ``deep_timeout``: an explicit
operator request, so it is sent to adopted roles too — but never to a port
outside ``allowed_ports``. Exit 0 pass, 1 fail with the reason.

``capabilities`` prints what this node can run: each launched runtime's
serve program and version probe, and whether each endpoint of a runtime it
never launches (Ollama, OpenAI-compatible servers) that a role names answers
its probes (GETs only).
"""

from __future__ import annotations

import os
import sys

from reconciler.core.exitcodes import Exit
from reconciler.commands import common
from reconciler.core.desired import Desired, RoleSpec
from reconciler.core.observed import Health, Remembered
from reconciler.runtimes import SPECS, spec_of
from reconciler.runtimes.common import (
    DeepResult,
    ProbeContext,
    ProbeRequest,
    deep_verdict,
    probe_status,
)


def _load(args) -> Desired | None:
    from reconciler.repo.sources import load_desired

    result = load_desired(common.manifest_paths(args), node=common.node_choice(args))
    if result.problems or result.desired is None:
        common.report_problems(result.problems)
        return None
    return result.desired


def _remembered(args, name: str) -> Remembered:
    """The store's record of the role, when a store exists (never created here)."""
    state = common.state_dir(args)
    if not os.path.exists(os.path.join(state, "state.db")):
        return Remembered()
    with common.open_store(args) as store:
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
    from reconciler.world import probe

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
    from reconciler.world.observe import observe

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


def run_health(args) -> int:
    desired = _load(args)
    if desired is None:
        return Exit.ERROR
    spec = desired.role(args.name)
    if spec is None:
        print(f"reconcile: error: no role {args.name!r} in the manifests", file=sys.stderr)
        return Exit.ERROR
    report = health_report(spec, desired, _remembered(args, spec.name), args.deep)
    if args.json:
        common.print_json(report)
    else:
        _print_report(report)
    return Exit.OK if report["ok"] else Exit.ERROR


# ---------------------------------------------------------------- capabilities


def capability_rows(desired: Desired) -> list[dict]:
    """One row per launched runtime, and per endpoint of a runtime never launched."""
    from reconciler.world import capabilities

    rows = []
    used = {r.runtime for r in desired.roles if r.managed}
    for cap in capabilities.runtime_capabilities(desired.node):
        version = cap.version_check.version if cap.version_check else None
        why = cap.why
        if cap.ok and cap.version_check is None:
            why = "no version_probe configured"
        rows.append({
            "runtime": str(cap.runtime), "program": cap.program, "version": version,
            "ok": cap.ok, "why": why, "needed": cap.runtime in used,
        })
    for rt in SPECS.values():
        if rt.launched:
            continue
        endpoints = sorted({(r.serve.host, r.serve.port) for r in desired.roles
                            if r.runtime is rt.runtime})
        rows += [_endpoint_row(rt.runtime, host, port, desired) for host, port in endpoints]
        if not endpoints:
            rows.append({"runtime": str(rt.runtime), "program": None, "version": None,
                         "ok": True, "why": f"no {rt.runtime} role (never launched)",
                         "needed": False})
    return rows


def _endpoint_row(runtime, host: str, port: int, desired: Desired) -> dict:
    """Does a server the reconciler never launches answer its runtime's probes (GETs)?"""
    import asyncio

    from reconciler.world import probe

    row = {"runtime": str(runtime), "program": f"{host}:{port}", "version": None,
           "ok": False, "why": "", "needed": True}
    if not desired.node.port_allowed(port):
        row["why"] = f"port {port} is outside allowed_ports {desired.node.allowed_ports}: not probed"
        return row
    rt, ctx = spec_of(runtime), ProbeContext(adopted=True)

    async def sender(request: ProbeRequest):  # type: ignore[no-untyped-def]
        return await probe.send(host, port, request, timeout=desired.node.probe_timeout)

    facts = rt.read(asyncio.run(probe.run_exchange(rt.exchange(ctx), sender)), ctx)
    row["ok"] = facts.health in (Health.UP, Health.LOADING)
    row["version"] = facts.version
    row["why"] = "" if row["ok"] else facts.detail
    return row


def run_capabilities(args) -> int:
    desired = _load(args)
    if desired is None:
        return Exit.ERROR
    from reconciler.commands import capdevices

    devices = capdevices.report(desired.node)
    if getattr(args, "devices_yaml", False):
        print(devices["yaml"], end="")
        if not devices["found"]:
            print("reconcile: no devices found: " + "; ".join(devices["notes"]), file=sys.stderr)
        return Exit.OK if devices["found"] else Exit.ERROR
    rows = capability_rows(desired)
    if args.json:
        common.print_json({"runtimes": rows, "devices": devices})
    else:
        table = [("RUNTIME", "PROGRAM", "VERSION", "OK")] + [
            (r["runtime"], r["program"] or "-", r["version"] or "-",
             ("ok" if r["ok"] else "no") + (f": {r['why']}" if r["why"] else ""))
            for r in rows
        ]
        widths = [max(len(row[i]) for row in table) for i in range(3)]
        for row in table:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[3])
    if not args.json:
        capdevices.print_text(devices)
    failed = [r for r in rows if r["needed"] and not r["ok"]]
    return Exit.ERROR if failed or capdevices.failed(devices) else Exit.OK
