"""aiohttp is loaded only by a daemon whose node has a router (BEHAVIOUR §9; a plain run stays fast)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "manifests" / "examples" / "on-demand"

PROBE = """
import sys
from reconciler import cli
import reconciler.daemon.watch, reconciler.commands.watch, reconciler.router.rules
code = cli.main(["-f", sys.argv[1], "plan", "--offline"])
print(code, sorted(m for m in ("aiohttp", "openai") if m in sys.modules))
"""


def test_plan_and_the_watch_modules_do_not_import_aiohttp() -> None:
    """A plan of a node with a router, and importing the daemon's modules, leave aiohttp unloaded."""
    out = subprocess.run([sys.executable, "-c", PROBE, str(EXAMPLE)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "0 []", out.stdout
