"""§2/§3/§4 what is ours: the one owner of each ownership rule (``core/ownership.py``)."""

from __future__ import annotations

import attrs
import pytest

from reconciler.core import ownership
from reconciler.core.desired import Mode, Runtime
from reconciler.core.observed import RoleRecord
from reconciler.core.observed import flat_record
from reconciler.core.ownership import Seen

ROOT = "/var/lib/reconciler/instances"
IID = "chat-0badcafe"
UID = 1000
OURS = Seen(pid=4242, create_time=100.0, marker=IID, pgid=4242, uid=UID, cwd=f"{ROOT}/{IID}")


def test_owned_needs_pid_create_time_and_marker() -> None:
    """§3 a recorded server may be signalled only when pid, create time and marker all match."""
    assert ownership.owned(OURS, 4242, 100.0, IID)
    assert ownership.owned(OURS, 4242, 100.04, IID), "psutil's 10 ms ticks are the same start"
    assert not ownership.owned(OURS, 4242, 101.0, IID), "a recycled pid"
    assert not ownership.owned(OURS, 4242, None, IID), "no recorded create time"
    assert not ownership.owned(OURS, 4243, 100.0, IID), "another pid"
    assert not ownership.owned(attrs.evolve(OURS, marker=None), 4242, 100.0, IID), "no marker"
    assert not ownership.owned(attrs.evolve(OURS, marker="other-1"), 4242, 100.0, IID)
    assert not ownership.owned(attrs.evolve(OURS, marker=""), 4242, 100.0, ""), "no instance"
    assert not ownership.owned(None, 4242, 100.0, IID), "nothing seen"


@pytest.mark.parametrize(("change", "why"), [
    ({"pgid": 1}, "not the leader of its own group"),
    ({"pgid": None}, "its group unread"),
    ({"uid": 0}, "another uid"),
    ({"cwd": f"/srv/other/{IID}"}, "another data root (another node's)"),
    ({"cwd": f"{ROOT}/{IID}/sub"}, "below the instance directory, not in it"),
    ({"cwd": f"{ROOT}/{IID}/sub", "marker": f"{IID}/sub"},
     "below the instance directory, with a marker naming that path"),
    ({"cwd": ROOT}, "the data root itself"),
    ({"cwd": None}, "its directory unread"),
    ({"marker": "other-00000000"}, "a marker that is not its directory's"),
    ({"marker": None}, "no marker"),
])
def test_the_orphan_proof_needs_every_part(change: dict, why: str) -> None:
    """§4 an unrecorded process is ours only as leader + uid + cwd = <root>/<id> + marker <id>."""
    assert ownership.proven(OURS, ROOT, UID) == IID
    assert ownership.proven(OURS, ROOT + "/", UID) == IID
    assert ownership.proven(attrs.evolve(OURS, **change), ROOT, UID) is None, why


def test_instance_in_and_leads_group() -> None:
    """The survey's cheap parts of the proof say what the whole proof says."""
    assert ownership.instance_in(ROOT, f"{ROOT}/{IID}") == IID
    assert ownership.instance_in(ROOT, f"{ROOT}x/{IID}") is None
    assert ownership.instance_in(ROOT, f"{ROOT}/") is None
    assert ownership.instance_in(ROOT, f"{ROOT}/{IID}/sub") is None, "exactly <root>/<id>"
    assert ownership.leads_group(7, 7) and not ownership.leads_group(7, 1)
    assert ownership.instance_dir(ROOT, IID) == f"{ROOT}/{IID}"


def _record(**kw) -> RoleRecord:
    return flat_record(name="chat", instance_id=IID, runtime=Runtime.OLLAMA, mode=Mode.MANAGED,
                      host="127.0.0.1", port=11434, **kw)


def test_a_model_we_loaded() -> None:
    """§2 ours to unload: our load put the tag there and no pass has seen it leave since."""
    ours = _record(we_loaded=True, model_tag="llama3:latest")
    assert ownership.loaded_by_us(ours) and ownership.our_load(ours)
    left = attrs.evolve(ours, exited_at=50.0)
    assert ownership.loaded_by_us(left) and not ownership.our_load(left), \
        "a copy resident after ours left was loaded by someone else"
    assert not ownership.loaded_by_us(_record(model_tag="llama3:latest")), "a client's load"
    with pytest.raises(TypeError, match="without its tag"):
        _record(we_loaded=True)  # no tag: a load of ours without one cannot be built
    assert not ownership.our_load(None)


def test_the_marker_is_defined_by_the_ownership_owner_alone() -> None:
    """§3: the marker's name is a string in core/ownership.py only (``MARKER_ENV``); the launch
    that sets it, the process table that reads it and the guards that name it import it there."""
    import ast
    from pathlib import Path

    package = Path(ownership.__file__).parents[1]
    spelled = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value == "RECONCILER_INSTANCE":
                spelled.add(path.relative_to(package).as_posix())
    assert spelled == {"core/ownership.py"}
    assert ownership.MARKER_ENV == "RECONCILER_INSTANCE"
