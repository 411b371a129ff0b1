"""Mutants of a node's pass under a rollout (BEHAVIOUR §13, issue 30, ``engine/rolloutpass.py``).

Each breaks one rule of the node side: what a waiting node runs, the gate asked
from the pass, the local rollback and its memory, what the node's metrics say.
The test that kills each names the rule (tests/rollout/test_node_pass.py).
"""

from __future__ import annotations

from tests.mutation.mutant import mutant

RO = "tests/rollout"
PASS = "engine/rolloutpass.py"

MUTANTS = (
    mutant(PASS, "waiting-node-restarts",
           "            roles[role] = runs_spec[role].spec",
           "            runs_spec[role].spec",
           "§13: a node whose turn has not come is given HEAD's spec anyway: every node "
           "restarts on the commit at once", RO),
    mutant(PASS, "unreadable-gate-goes",
           '            out[key] = GateAnswer(open=None, reason=f"gate failed: {err}")',
           '            out[key] = GateAnswer(open=True, reason=f"gate failed: {err}")',
           "§13: a gate that raised lets the wave move: unknown is go", RO),
    mutant(PASS, "no-rollback-on-gave-up", '        why = "gave up"', '        why = ""',
           "§13: a canary whose new revision gave up stays down on it instead of going back "
           "to the revision it ran before", RO),
    mutant(PASS, "no-rollback-after-bake",
           '        why = f"not ready within the bake ({bake:g}s)"', '        why = ""',
           "§13: a new revision that never answers within the bake is kept", RO),
    mutant(PASS, "failed-revision-retried",
           "        if run.failed == head and role in runs_spec and role in new:",
           "        if False and run.failed == head and role in runs_spec and role in new:",
           "§13: after a rollback the next pass takes the failed commit again (and gives up "
           "again, and rolls back…)", RO),
    mutant(PASS, "rollback-memory-never-cleared",
           "            run = run.evolve(failed=None)  # a new commit: it may be taken again",
           "            pass",
           "§13: a node that rolled back exports reconciler_rollout_rolled_back forever: "
           "ReconcilerRolloutRolledBack fires on after the fix", RO),
    mutant("report/metrics.py", "waiting-node-reports-head",
           "            revision.add_metric((node, role, staged.get(role, commit), ran), 1)",
           "            revision.add_metric((node, role, commit, ran), 1)",
           "§13: a waiting node reports the new revision: the gate counts it healthy on a "
           "commit it never ran", RO),
    mutant("report/metrics.py", "rollback-not-exported",
           "        rolled_back.add_metric((node, role, failed), 1)",
           "        pass",
           "§13: reconciler_rollout_rolled_back is never 1: the gate's rule cannot tell a "
           "rollback", RO),
    mutant("core/rollouts.py", "instances-not-staged",
           "self.roles is None or role in self.roles or group_of(role) in self.roles",
           "self.roles is None or role in self.roles",
           "§12/§13: a bad commit reaches every instance but the first of a role, unstaged",
           "tests/rollout"),
)
