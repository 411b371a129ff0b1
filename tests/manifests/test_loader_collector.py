"""load() pauses Python's cyclic garbage collector while it works, and leaves it as it found it."""

from __future__ import annotations

import gc

import pytest

from reconciler.manifests import loader, yamlsafe
from tests.fleet.worlds import files, model, node


@pytest.mark.parametrize("enabled", [True, False])
@pytest.mark.parametrize("clean", [True, False], ids=["clean", "problems"])
def test_collector_left_as_found(enabled: bool, clean: bool) -> None:
    """The loader pauses the cyclic collector while it reads files, and leaves it as it found it (on
    or off), clean set or not."""
    docs = files(node("gpu-1"), model()) if clean else [("f.yaml", b"a: [1\n")]
    seen: list[bool] = []
    real = yamlsafe.parse

    def parse(*args):  # what the collector is while the files are read
        seen.append(gc.isenabled())
        return real(*args)

    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        loader.yamlsafe.parse = parse
        result = loader.load(docs)
        assert result.ok == clean
        assert gc.isenabled() == enabled
        assert seen == [False]
    finally:
        loader.yamlsafe.parse = real
        gc.enable() if was else gc.disable()


def test_collector_back_on_after_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector the loader paused is back on after the load raises."""
    def boom(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(yamlsafe, "parse", boom)
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        loader.load([("f.yaml", b"a: 1\n")])
    assert gc.isenabled()
