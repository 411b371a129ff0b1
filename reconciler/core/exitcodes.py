"""Process exit codes of every ``reconcile`` command, in one place (PURE).

Not to be confused with why a *server* exited (the platform's exit watch notices that;
the status detail says why). These are the codes the reconciler itself
returns to cron, systemd or a CI job:

* ``OK`` (0): done; for ``plan --detailed-exitcode``: no changes.
* ``ERROR`` (1): bad usage, invalid manifests (nothing was changed), an
  unusable state store, a failed action.
* ``CHANGES`` (2): ``plan --detailed-exitcode`` found changes to make.
* ``OPERATOR`` (3): ``--once``/``apply``/``start``: a role needs an operator
  (gave-up, stopped-exposed, unplaceable, refused).
"""

from __future__ import annotations

import enum


class Exit(enum.IntEnum):
    OK = 0
    ERROR = 1
    CHANGES = 2
    OPERATOR = 3
