"""``python -m reconciler`` is the ``reconcile`` command."""

from reconciler.cli import main

raise SystemExit(main())
