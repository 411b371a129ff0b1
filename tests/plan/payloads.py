"""One payload of every verb (``core/decisions.Act``), for tests that must cover each verb."""

from __future__ import annotations

from reconciler.core.decisions import (
    Forget, GiveUp, Keep, Load, Refuse, Restart, Start, Stop, Target, Unload, Wait)

TARGET = Target(pid=4242, create_time=1.0, owner_id="coder-1")

#: Every payload class once (a test over them covers every verb).
SAMPLES = (
    Start(launch=None, reserve=1),
    Restart(launch=None, replaces=TARGET, reserve=1),
    Stop(target=TARGET),
    Load(tag="qwen", keep_alive=60.0, reserve=1),
    Unload(tag="qwen"),
    Keep(running=TARGET),
    Wait(),
    Refuse(),
    GiveUp(),
    Forget(),
)
