"""Mutants of the rollout rules (BEHAVIOUR §13, issue 30).

Each breaks one rule of the schedule (``planner/rollout.py``), the gate
(``planner/rolloutgate.py``, ``world/gate.py``), the Rollout document
(``manifests/rolloutdoc.py``), ``fleet --rollout`` (``fleet/rolloutview.py``) or
the metric a gate reads (``report/metrics.py``); the test that kills it names the rule.
"""

from __future__ import annotations

from tests.mutation.mutant import mutant

RO, MAN, FLEET = "tests/rollout", "tests/manifests", "tests/fleet"

MUTANTS = (
    mutant("planner/rollout.py", "canary-not-first",
           "    if wave.canary:\n        fraction = 0.0", "    if False:\n        fraction = 0.0",
           "§13: a canary wave's nodes move spread over its slice, not all when it opens", RO),
    mutant("planner/rollout.py", "moves-when-wave-opens", "    if now < where.at:",
           "    if now < where.opens:",
           "§13: every node of a wave moves when the wave opens, not at its own moment", RO),
    mutant("planner/rollout.py", "unknown-gate-opens", "        if answer.open is not True:",
           "        if answer.open is False:",
           "§13: a gate that could not be read (or was not asked) lets a wave move", RO),
    mutant("planner/rollout.py", "pause-ignored", "    if rollout.paused:", "    if False:",
           "§13: paused: true does not hold the nodes", RO),
    mutant("planner/rollout.py", "salted-hash",
           'return int.from_bytes(digest[:8], "big") / 2.0**64',
           "return (hash(name) % 2**32) / 2.0**32",
           "§13: a node's place within its wave differs from machine to machine (Python's "
           "salted hash)", RO),
    mutant("planner/rollout.py", "gate-on-first-wave", "    if where.wave > 0 and rollout.gate",
           "    if where.wave >= 0 and rollout.gate",
           "§13: the first wave waits for a gate about the waves before it (there are none): "
           "the canaries never move", RO),
    mutant("planner/rollout.py", "revert-staged",
           "    if before is not None and new == before:", "    if False:",
           "§13: a revert to what the node ran before waits for a wave", RO),
    mutant("planner/rollout.py", "stop-staged", "    if now.state is WantedState.STOPPED:\n"
           "        return Change(kind=Kind.AT_ONCE, reason=\"state: stopped\")",
           "    if False:\n        return Change(kind=Kind.AT_ONCE, reason=\"state: stopped\")",
           "§13: state: stopped on a bad change waits for the node's turn", RO),
    mutant("planner/rollout.py", "uncovered-role-staged",
           "if what.kind is not Kind.STAGED or rollout is None:",
           "if what.kind is not Kind.STAGED:",
           "§13: a role no Rollout covers is held by the schedule of none (a crash, or held)",
           RO),
    mutant("planner/rollout.py", "gate-asked-early", "        if step.why is Why.GATE:",
           "        if step.why is not Why.PAUSED:",
           "§13: a node's pass queries Prometheus before its moment has come (every node, "
           "every pass)", RO),
    mutant("planner/rolloutgate.py", "empty-result-opens",
           "    if not isinstance(result, list) or not result:",
           "    if not isinstance(result, list):",
           "§13: a query with no sample (no node reported) opens the gate", RO),
    mutant("planner/rolloutgate.py", "zero-opens", "        if value is None or value == 0:",
           "        if value is None:",
           "§13: a sample of 0 (a node not healthy) does not close the gate", RO),
    mutant("planner/rolloutgate.py", "bake-ignored", "    if gate.bake <= 0:\n        return text",
           "    if True:\n        return text",
           "§13: the bake is not asked: a wave opens on one healthy instant", RO),
    mutant("planner/rolloutgate.py", "no-nodes-match-all", 'return "$^"  #', 'return ".*"  #',
           "§13: with no earlier node the gate's node regex matches every node", RO),
    mutant("world/gate.py", "unreachable-opens",
           "            return rolloutgate.read(None, None, error=str(getattr(err, \"reason\", err)))",
           "            return GateAnswer(open=True, reason=\"unreachable\")",
           "§13: a Prometheus that cannot be reached opens the gate", RO),
    mutant("manifests/rolloutdoc.py", "time-without-offset",
           "([Zz]|[+-][0-9]{2}:[0-9]{2})$", "([Zz]|[+-][0-9]{2}:[0-9]{2})?$",
           "§13: a start without an offset is accepted (another instant on every node's clock)",
           MAN, RO),
    mutant("manifests/rolloutdoc.py", "role-in-two-rollouts", "            if first[1] is not doc:",
           "            if False:",
           "§13: a role staged by two Rollouts is accepted (which window does it follow?)", MAN),
    mutant("manifests/rolloutdoc.py", "canary-anywhere", "        if canary and i > 0:",
           "        if canary and i > 99:", "§13: a canary wave after the first is accepted", MAN),
    mutant("fleet/rolloutview.py", "gates-ignored",
           "        wave_gates = {w: got[0] for w, got in mine.items() if got}",
           "        wave_gates = {}",
           "§13: fleet --rollout shows every later wave held even when its gate answered open",
           RO),
    mutant("fleet/rolloutview.py", "gate-asked-about-its-own-wave",
           "            if wave.index > 0:\n"
           "                out.append((rv.rollout, wave.name, tuple(sorted(before))))\n"
           "            before += [t.node for t in wave.nodes]",
           "            before += [t.node for t in wave.nodes]\n"
           "            if wave.index > 0:\n"
           "                out.append((rv.rollout, wave.name, tuple(sorted(before))))",
           "§13: a wave's gate is asked about its own nodes too, which have not moved: it "
           "never opens", RO),
    mutant("report/metrics.py", "revision-not-published",
           "            revision.add_metric((node, role, staged.get(role, commit), ran), 1)",
           "            revision.add_metric((node, role, \"\", ran), 1)",
           "§13: reconciler_role_revision does not say the commit: a gate cannot tell the new "
           "revision from the old", FLEET, RO),
)
