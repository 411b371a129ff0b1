"""The pass's seams (``engine/seams.py``): each implementation answers its Protocol.

``PassInputs.store``, ``.verifier`` and ``.gate`` are typed by Protocols; the
classes the commands and the daemon hand in must have every method, with the
same parameters (names, kinds, defaults), so a renamed parameter or a dropped
method fails here, not in the middle of a pass.
"""

from __future__ import annotations

import inspect

import pytest

from reconciler.engine import seams
from reconciler.models.modelstore import MemoryStampStore, StampStore, Verifier
from reconciler.router.service import Router
from reconciler.state.store import Store

PAIRS = [(seams.PassStore, Store), (seams.Verifier, Verifier), (seams.Gate, Router),
         (StampStore, seams.PassStore)]


def _methods(protocol) -> list[str]:
    return sorted(name for name, value in vars(protocol).items()
                  if callable(value) and not name.startswith("_"))


def _shape(function) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("protocol, implementation", PAIRS,
                         ids=[f"{i.__name__}-is-{p.__name__}" for p, i in PAIRS])
def test_the_implementation_has_every_method_with_its_parameters(protocol, implementation):
    """Every method of the Protocol, with the same parameter names, kinds and defaults."""
    assert _methods(protocol), "a Protocol without methods checks nothing"
    for name in _methods(protocol):
        assert hasattr(implementation, name), f"{implementation.__name__} has no {name}"
        assert _shape(getattr(implementation, name)) == _shape(getattr(protocol, name)), name


def test_a_real_store_and_verifier_are_instances(tmp_path):
    """The objects a pass is given pass the runtime check too."""
    store = Store(str(tmp_path / "state.db"))
    try:
        assert isinstance(store, seams.PassStore)
        assert isinstance(Verifier(store), seams.Verifier)
        assert not isinstance(MemoryStampStore(), seams.PassStore)
    finally:
        store.close()
