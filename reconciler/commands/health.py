"""``reconcile health NAME [--deep]`` and ``reconcile capabilities`` (SHELL).

``health`` observes one role exactly as a pass would and prints the whole
probe report; exit 0 when the role is up, 1 otherwise. ``--deep`` then asks
the server for one token (BEHAVIOUR §2) with ``deep_timeout``: an explicit
operator request, so it is sent to adopted roles too — but never to a port
outside ``allowed_ports``. Exit 0 pass, 1 fail with the reason.

``capabilities`` prints what this node can run: each launchable runtime's
serve program and version probe, and whether each Ollama endpoint a role
names answers ``/api/version``.
"""

from __future__ import annotations

import os
import sys

from reconciler.exitcodes import Exit
from reconciler.commands import common
from reconciler.desired import Desired, RoleSpec, Runtime
from reconciler.observed import Health, Remembered
from reconciler.runtimes import llamacpp, mlx_lm, ollama
from reconciler.runtimes.common import (
    DeepResult,
    ProbeContext,
    ProbeRequest,
    deep_verdict,
    probe_status,
)


def _load(args) -> Desired | None:
    from reconciler.sources import load_desired

    result = load_desired(common.manifest_paths(args))
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


def deep_request(spec: RoleSpec, desired: Desired) -> ProbeRequest | str:
    """The §2 deep health request for a role, or why there is none."""
    if spec.runtime is Runtime.LLAMACPP:
        return llamacpp.deep_request(spec.model or spec.name)
    if spec.runtime is Runtime.MLX_LM:
        return mlx_lm.deep_request()
    model = desired.model(spec.model)
    tag = model.ollama_tag if model is not None else None
    if not tag:
        return f"role {spec.name} names no Ollama model tag"
    keep_alive = spec.keep_alive if spec.keep_alive is not None else desired.node.keep_alive
    return ollama.deep_request(tag, keep_alive)


def deep_check(spec: RoleSpec, desired: Desired) -> DeepResult:
    from reconciler import probe

    if not desired.node.port_allowed(spec.serve.port):
        return DeepResult(
            ok=False,
            detail=f"port {spec.serve.port} is outside allowed_ports "
            f"{desired.node.allowed_ports}: not probed",
        )
    request = deep_request(spec, desired)
    if isinstance(request, str):
        return DeepResult(ok=False, detail=request)
    answer = probe.send_sync(
        spec.serve.host, spec.serve.port, request, timeout=desired.node.deep_timeout
    )
    return deep_verdict(request, answer)


def health_report(spec: RoleSpec, desired: Desired, remembered: Remembered, deep: bool) -> dict:
    from reconciler.observe import observe

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
        result = deep_check(spec, desired)
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
    """One row per launchable runtime and per Ollama endpoint a role names."""
    from reconciler import capabilities, probe

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
    endpoints = sorted({
        (r.serve.host, r.serve.port) for r in desired.roles if r.runtime is Runtime.OLLAMA
    })
    for host, port in endpoints:
        row = {"runtime": "ollama", "program": f"{host}:{port}", "version": None,
               "ok": False, "why": "", "needed": True}
        if not desired.node.port_allowed(port):
            row["why"] = f"port {port} is outside allowed_ports {desired.node.allowed_ports}: not probed"
        else:
            answer = probe.send_sync(host, port, ollama.VERSION, timeout=desired.node.probe_timeout)
            facts = ollama.read({ollama.VERSION.path: answer}, ProbeContext())
            body = answer.body if isinstance(answer.body, dict) else {}
            row["ok"] = answer.ok
            row["version"] = body.get("version") if answer.ok else None
            row["why"] = "" if answer.ok else facts.detail
        rows.append(row)
    if not endpoints:
        rows.append({"runtime": "ollama", "program": None, "version": None, "ok": True,
                     "why": "no Ollama role (never launched)", "needed": False})
    return rows


def run_capabilities(args) -> int:
    desired = _load(args)
    if desired is None:
        return Exit.ERROR
    rows = capability_rows(desired)
    if args.json:
        common.print_json({"runtimes": rows})
    else:
        table = [("RUNTIME", "PROGRAM", "VERSION", "OK")] + [
            (r["runtime"], r["program"] or "-", r["version"] or "-",
             ("ok" if r["ok"] else "no") + (f": {r['why']}" if r["why"] else ""))
            for r in rows
        ]
        widths = [max(len(row[i]) for row in table) for i in range(3)]
        for row in table:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[3])
    failed = [r for r in rows if r["needed"] and not r["ok"]]
    return Exit.ERROR if failed else Exit.OK
