"""Mutants of the instance rules (§12, issue 28's planner side): ports, scale, devices, rollout.

Each breaks one rule an operator of a role with ``replicas`` would notice;
``tests/mutation/catalogue.py`` collects them.
"""

from __future__ import annotations

from tests.mutation.mutant import mutant

PL, RO, LA, NC, IN, PN = ("planner/placement.py", "planner/stages/rolling.py",
                          "planner/stages/ladder.py", "manifests/nodecheck.py",
                          "core/instances.py", "planner/plan.py")
PLAN, REP, MAN = "tests/plan", "tests/replicas", "tests/manifests"

MUTANTS = (
    mutant(PL, "instances-share-a-device", "return min(found) if found else None",
           "return None",
           "§12: two instances of one role are placed on one GPU (one card's failure takes both)",
           PLAN, REP),
    mutant(RO, "all-at-once", "go = update[:1]", "go = update",
           "§12: a new generation restarts every instance at once: the role is down for clients",
           PLAN, REP),
    mutant(RO, "next-before-ready",
           "busy = [i for i in members if i not in update and _away(drafts[i])]",
           "busy = []",
           "§12: the next instance restarts before the restarted one answers (two down; a "
           "gave-up first instance does not stop the rollout)", PLAN, REP),
    mutant(PN, "no-rolling-stage", "    drafted = rolling.stage(drafted)",
           "    drafted = drafted", "§12: the rolling-update stage is left out", PLAN, REP),
    mutant(LA, "scale-down-not-said", "replica >= now and d.reason is Reason.REMOVED",
           "replica > now and d.reason is Reason.REMOVED",
           "§12: replicas 3 → 2 stops chat/2 as 'removed', the plan does not say it scaled down",
           PLAN, REP),
    mutant(IN, "scale-down-lowest", "for i in range(1, spec.replicas):",
           "for i in range(2, spec.replicas + 1):",
           "§12: instances are not chat, chat/1 … chat/N-1: scaling down stops the wrong one",
           REP, PLAN),
    mutant(NC, "instance-port-collision-allowed", "if first[0] is draft and first[1] == name:",
           "if True:",
           "§12: validate lets chat/2 listen on another role's port", MAN, REP),
    mutant(NC, "instance-port-outside-allowed",
           "if not config.port_allowed(spec.serve.port + i)]", "if False]",
           "§12: validate lets an instance listen outside allowed_ports", MAN, REP),
    mutant("manifests/devicecheck.py", "instances-fit-one-device", "taken if apart else set()",
           "set()", "§12: validate does not warn that a role's instances do not all fit the "
           "devices (it counts two on one card)", REP, MAN),
)
