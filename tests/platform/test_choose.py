"""``RECONCILER_PLATFORM``: which implementation a process uses (choose.py)."""

from __future__ import annotations

import pytest

from reconciler.core.errors import PlatformError
from reconciler.platform import choose


def test_the_default_is_linux_on_linux_macos_on_darwin_and_portable_elsewhere():
    """Unset or blank: linux on Linux, macos on macOS (``darwin``), portable on any other."""
    assert choose.name({}, "linux") == "linux"
    assert choose.name({"RECONCILER_PLATFORM": " "}, "linux") == "linux"
    assert choose.name({}, "darwin") == "macos"
    assert choose.name({"RECONCILER_PLATFORM": ""}, "darwin") == "macos"
    assert choose.name({}, "freebsd14") == "portable"


def test_the_setting_picks_either_where_it_can_run():
    """portable anywhere; linux only on Linux; anything else refused, naming the choices."""
    assert choose.name({"RECONCILER_PLATFORM": "portable"}, "linux") == "portable"
    assert choose.name({"RECONCILER_PLATFORM": "linux"}, "linux") == "linux"
    assert choose.name({"RECONCILER_PLATFORM": "portable"}, "darwin") == "portable"
    assert choose.name({"RECONCILER_PLATFORM": "macos"}, "darwin") == "macos"
    with pytest.raises(PlatformError, match="expected one of linux, portable, macos"):
        choose.check({"RECONCILER_PLATFORM": "osx"})
    with pytest.raises(PlatformError, match="on darwin"):
        choose.name({"RECONCILER_PLATFORM": "linux"}, "darwin")
    with pytest.raises(PlatformError, match="RECONCILER_PLATFORM=macos on linux: use portable"):
        choose.name({"RECONCILER_PLATFORM": "macos"}, "linux")


def test_build_gives_each_by_name():
    """``build`` makes the named implementation (macos too, off macOS: its psutil facts run
    anywhere; its exit watch says it needs kqueue)."""
    assert choose.build("portable").name == "portable"
    assert choose.build("linux").name == "linux"
    assert choose.build("macos").name == "macos"


def test_a_wrong_setting_is_refused_before_any_command(monkeypatch, tmp_path, capsys):
    """``reconcile`` with RECONCILER_PLATFORM=bogus: one line naming the choices, exit 1."""
    from reconciler import cli

    monkeypatch.setenv("RECONCILER_PLATFORM", "bogus")
    assert cli.main(["validate", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        "reconcile: error: RECONCILER_PLATFORM='bogus': expected one of linux, portable, macos\n")
