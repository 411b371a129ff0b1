"""``RECONCILER_PLATFORM``: which implementation a process uses (choose.py)."""

from __future__ import annotations

import pytest

from reconciler.core.errors import PlatformError
from reconciler.platform import choose


def test_the_default_is_linux_on_linux_and_portable_elsewhere():
    """Unset or blank: linux on Linux, portable on any other system."""
    assert choose.name({}, "linux") == "linux"
    assert choose.name({"RECONCILER_PLATFORM": " "}, "linux") == "linux"
    assert choose.name({}, "darwin") == "portable"


def test_the_setting_picks_either_where_it_can_run():
    """portable anywhere; linux only on Linux; anything else refused, naming the choices."""
    assert choose.name({"RECONCILER_PLATFORM": "portable"}, "linux") == "portable"
    assert choose.name({"RECONCILER_PLATFORM": "linux"}, "linux") == "linux"
    with pytest.raises(PlatformError, match="expected one of linux, portable"):
        choose.check({"RECONCILER_PLATFORM": "macos"})
    with pytest.raises(PlatformError, match="on darwin"):
        choose.name({"RECONCILER_PLATFORM": "linux"}, "darwin")


def test_build_gives_each_by_name():
    """``build`` makes the named implementation."""
    assert choose.build("portable").name == "portable"
    assert choose.build("linux").name == "linux"


def test_a_wrong_setting_is_refused_before_any_command(monkeypatch, tmp_path, capsys):
    """``reconcile`` with RECONCILER_PLATFORM=bogus: one line naming the choices, exit 1."""
    from reconciler import cli

    monkeypatch.setenv("RECONCILER_PLATFORM", "bogus")
    assert cli.main(["validate", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        "reconcile: error: RECONCILER_PLATFORM='bogus': expected one of linux, portable\n")
