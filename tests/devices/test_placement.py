"""The per-device ledger's picks and shares, rule by rule (§7.1; ``planner/placement.py``).

Each test names one rule of BEHAVIOUR §7.1 and builds the smallest ledger that
tells the rule from its nearest wrong reading (a boundary one byte off, the
emptiest device instead of the fullest, any kind instead of the runtime's).
"""

from __future__ import annotations

from reconciler.core.devices import Device, DeviceKind, DeviceRequest, shares
from reconciler.planner.placement import Claim, DeviceLedger

GB = 10**9
CUDA = frozenset({DeviceKind.CUDA})


def _ledger(*sizes: int) -> DeviceLedger:
    return DeviceLedger(tuple(Device(id=f"cuda:{i}", kind=DeviceKind.CUDA, memory=s)
                              for i, s in enumerate(sizes)))


def _claim(footprint: int, count: int | None = None, ids: tuple[str, ...] = (),
           split: tuple[float, ...] = ()) -> Claim:
    return Claim(request=DeviceRequest(count=count, ids=ids, split=split),
                 footprint=footprint, kinds=CUDA)


def test_shares_are_rounded_up_and_the_last_takes_the_rest() -> None:
    """§7.1 a footprint divided over devices: each share rounded up, the last takes the rest,
    so the shares add up to exactly the footprint (never less is reserved, never more)."""
    assert shares(10, (), 3) == (4, 4, 2)
    assert shares(10, (1.0, 1.0), 2) == (5, 5)
    assert shares(7, (3.0, 1.0), 2) == (6, 1)  # 5.25 rounded up; the rest
    for total, split, n in ((10, (), 3), (32 * GB + 1, (3.0, 1.0), 2), (20 * GB + 1, (), 3)):
        assert sum(shares(total, split, n)) == total


def test_a_device_with_exactly_the_share_free_takes_it() -> None:
    """§7.1 a share fits a device whose free memory is exactly that share: for a count of
    one, for a count of several, and for fixed ids (one byte more does not fit)."""
    one = _ledger(24 * GB)
    assert one.pick("a", _claim(24 * GB, count=1)).ids == ("cuda:0",)
    assert one.pick("a", _claim(24 * GB + 1, count=1)) is None
    two = _ledger(12 * GB, 12 * GB)
    assert two.pick("a", _claim(24 * GB, count=2)).ids == ("cuda:0", "cuda:1")
    assert two.pick("a", _claim(24 * GB + 2, count=2)) is None
    fixed = _ledger(24 * GB)
    assert fixed.pick("a", _claim(24 * GB, ids=("cuda:0",))).ids == ("cuda:0",)
    assert fixed.pick("a", _claim(24 * GB + 1, ids=("cuda:0",))) is None


def test_best_fit_for_a_count_of_several_takes_the_fullest_devices() -> None:
    """§7.1 best fit for ``count > 1``: of the devices that still hold a share, those with
    the least free memory (ties by index), keeping the emptiest for a bigger claim."""
    ledger = _ledger(24 * GB, 24 * GB, 24 * GB, 24 * GB)
    ledger.hold("x", (("cuda:0", 10 * GB), ("cuda:3", 4 * GB)))  # free 14, 24, 24, 20
    assert ledger.pick("a", _claim(16 * GB, count=2)).ids == ("cuda:0", "cuda:3")
    assert ledger.pick("a", _claim(30 * GB, count=2)).ids == ("cuda:1", "cuda:3")  # 15 each
