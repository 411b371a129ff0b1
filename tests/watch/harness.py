"""A watch daemon with a fake pass, run as a process by test_signals.py.

``python -m tests.watch.harness STATE_DIR PASS_SECONDS``: every pass prints
``pass start`` and ``pass end`` on stdout (sleeping PASS_SECONDS between, to
stand for a slow action); the daemon's own log (DEBUG, so each pass's reason
shows) goes to stderr.
"""

from __future__ import annotations

import logging
import sys
import time

from reconciler.report import logs
from reconciler.state.store import Store
from reconciler.daemon.watch import Daemon
from reconciler.engine.loop import PassInputs
from tests.support.fakes import desired, good


def main() -> int:
    state_dir, seconds = sys.argv[1], float(sys.argv[2])
    logs.setup("text", level=logging.DEBUG)

    def fake_pass(inputs):
        print("pass start", flush=True)
        time.sleep(seconds)
        print("pass end", flush=True)
        return good(desired("chat"))

    with Store(state_dir) as store:
        daemon = Daemon(PassInputs(paths=[state_dir + "/no-manifests"], store=store,
                                   state_dir=state_dir),
                        resync=3600, apply_pass=fake_pass, watch_files=False)
        code = daemon.run()
    print(f"exit {code}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
