"""``reconcile capabilities``: what this node can run, and why not (SHELL).

It prints each launched runtime's serve program and version probe, and
whether each endpoint of a runtime it never launches (Ollama,
OpenAI-compatible servers) that a role names answers its probes (GETs only,
never to a port outside ``allowed_ports``). Exit 1 when a runtime a role
needs cannot run.
"""

from __future__ import annotations

import sys

import attrs

from reconciler.commands import capdevices, common
from reconciler.commands.options import GlobalOptions
from reconciler.core.desired import Desired
from reconciler.core.exitcodes import Exit
from reconciler.core.observed import Health
from reconciler.repo.sources import load_desired
from reconciler.runtimes import SPECS, spec_of
from reconciler.runtimes.common import ProbeContext
from reconciler.world import capabilities, probe


@attrs.frozen(kw_only=True)
class CapabilitiesOptions:
    json: bool = False
    devices_yaml: bool = False


def _load(g: GlobalOptions) -> Desired | None:
    result = load_desired(common.manifest_paths(g), node=common.node_choice(g))
    if result.problems or result.desired is None:
        common.report_problems(result.problems)
        return None
    return result.desired


def capability_rows(desired: Desired) -> list[dict]:
    """One row per launched runtime, and per endpoint of a runtime never launched."""
    rows = []
    used = {r.runtime for r in desired.roles if r.managed}
    for cap in capabilities.runtime_capabilities(desired.node, desired.programs):
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
    row = {"runtime": str(runtime), "program": f"{host}:{port}", "version": None,
           "ok": False, "why": "", "needed": True}
    if not desired.node.port_allowed(port):
        row["why"] = f"port {port} is outside allowed_ports {desired.node.allowed_ports}: not probed"
        return row
    rt, ctx = spec_of(runtime), ProbeContext(adopted=True)

    facts = rt.read(probe.run_exchange(rt.exchange(ctx), host, port,
                                       timeout=desired.node.probe_timeout), ctx)
    row["ok"] = facts.health in (Health.UP, Health.LOADING)
    row["version"] = facts.version
    row["why"] = "" if row["ok"] else facts.detail
    return row


def run(g: GlobalOptions, o: CapabilitiesOptions) -> int:
    desired = _load(g)
    if desired is None:
        return Exit.ERROR
    devices = capdevices.report(desired.node)
    if o.devices_yaml:
        print(devices["yaml"], end="")
        if not devices["found"]:
            print("reconcile: no devices found: " + "; ".join(devices["notes"]), file=sys.stderr)
        return Exit.OK if devices["found"] else Exit.ERROR
    rows = capability_rows(desired)
    if o.json:
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
        capdevices.print_text(devices)
    failed = [r for r in rows if r["needed"] and not r["ok"]]
    return Exit.ERROR if failed or capdevices.failed(devices) else Exit.OK
