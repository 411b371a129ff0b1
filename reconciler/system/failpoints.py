"""Named points where a test may have the reconciler killed (SHELL; for the kill -9 tests).

``RECONCILER_FAILPOINT=NAME[:N]`` makes the N-th time (default the first) a
pass reaches ``reach(NAME)`` send SIGKILL to the reconciler itself, exactly
as a `kill -9` from outside would land there. Without the variable a point
costs one comparison. The points, in the order a pass reaches them:

``rollout-written`` §13 rollout.json replaced: what each staged role runs; nothing acted
``intent-written``  an action's intent is in the store; nothing signalled yet
``stopped``         a restart's old server is gone; the new one not spawned
``before-spawn``    right before a spawn
``after-spawn``     spawned; the pid not recorded yet
``spawn-recorded``  the new server's record written
``recording``       the record room, before each role's record
``fetch-intent``    a Model fetch's row is in the store; the fetch not spawned (§1.6)
``fetch-spawned``   the fetch process runs; its pid not recorded yet

They let the tests of BEHAVIOUR §3/§4 (intents, orphans, interrupted restarts
not counted) hit the narrow windows that random kill times rarely reach.
"""

from __future__ import annotations

import os

from reconciler.system import signals

_SPEC = os.environ.get("RECONCILER_FAILPOINT", "")
_NAME, _, _NTH = _SPEC.partition(":")
_hits = 0


def reach(name: str) -> None:
    """SIGKILL this process if ``name`` is the armed point and this is its N-th hit."""
    global _hits
    if name != _NAME:
        return
    _hits += 1
    if _hits >= (int(_NTH) if _NTH.isdigit() else 1):
        signals.kill(os.getpid())
