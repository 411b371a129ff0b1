"""The kill -9 scenario, longer than CI runs it: ``.venv/bin/python tools/kill9.py --rounds 600``.

Same scenario as ``tests/e2e/test_kill9.py`` (``tests/e2e/killnine.py``): the
real llama-server from the testbed, `reconcile --once` SIGKILLed at random
moments over a whole pass and at named failpoints, then plain passes until
nothing changes. Prints the figures; exit 1 if anything is left behind.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e import killnine  # noqa: E402
from tests.e2e.conftest import World, free_port  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--seed", type=int, default=9)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="reconciler-kill9-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    world = World(root)
    used: set[int] = set()

    def fresh_port() -> int:
        port = free_port()
        while port in used:
            port = free_port()
        used.add(port)
        return port

    try:
        scenario = killnine.Scenario(world, [fresh_port() for _ in killnine.ROLES], fresh_port)
        figures = killnine.Figures()
        scenario.write(0)
        killnine.one_pass(world)
        scenario.write(1)
        figures.pass_length = killnine.measure(world)
        killnine.run_rounds(world, scenario, args.rounds, random.Random(args.seed), figures)
        wanted = scenario.write(0)
        figures.passes_to_converge = killnine.converge(world)
        extra = killnine.check(world, wanted, figures)
        serving = killnine.all_serving(world, wanted)
        print(figures.line() + f", all wanted serving: {serving}")
        for line in figures.miscounted:
            print("  miscounted:", line)
        return 0 if serving and not extra and figures.restarts_counted == 0 \
            and figures.integrity == "ok" else 1
    finally:
        world.kill_all()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
