"""§4/§5 what acting finds that needs an operator: `--once`, `apply` and `start` exit 3 for it.

§4 "A refusal found while acting needs an operator": a model (or Program) that
fails verification right before a spawn, and a new server found exposed in the
pass that started it (§5 "After start": the role held ``stopped-exposed``),
exit 3 as if the plan had found them; other failed actions exit 1.
``Outcome.needs_operator`` is that rule, and ``apply``'s exit code reads it.
"""

from __future__ import annotations

import attrs
import pytest

from reconciler.commands import apply, common
from reconciler.commands.options import GlobalOptions
from reconciler.core.decisions import Plan, Verb
from reconciler.core.exitcodes import Exit
from reconciler.core.outcomes import NEEDS_OPERATOR, Guard, Outcome, Refusal
from reconciler.engine.loop import PassResult

EXPOSED = Outcome(role="coder", verb=Verb.START, ok=True, pid=41,
                  detail="stopped: reachable beyond loopback on 0.0.0.0:8090",
                  exposed=("0.0.0.0:8090",))


def _refused(guard: Guard) -> Outcome:
    return Outcome(role="coder", verb=Verb.START, ok=False,
                   refusal=Refusal(guard=guard, detail=f"{guard.value} said no"))


def test_a_server_found_exposed_after_its_start_needs_an_operator() -> None:
    """§5 After start: a new server that listens beyond loopback is stopped and its role held
    stopped-exposed — that outcome needs an operator, though the start itself went ok."""
    assert EXPOSED.needs_operator
    assert not attrs.evolve(EXPOSED, exposed=(), detail="").needs_operator


@pytest.mark.parametrize("guard", sorted(Guard, key=str))
def test_only_a_refusal_about_what_a_start_would_serve_needs_an_operator(guard: Guard) -> None:
    """§4 a model or Program that fails verification right before a spawn (model_unverified,
    model_path, program_unverified) needs an operator; every other guard's refusal is a failed
    action (exit 1), and a plain failure without a refusal is one too."""
    needs = {Guard.MODEL_UNVERIFIED, Guard.MODEL_PATH, Guard.PROGRAM_UNVERIFIED}
    assert NEEDS_OPERATOR == needs
    assert _refused(guard).needs_operator is (guard in needs), guard
    assert not Outcome(role="coder", verb=Verb.START, ok=False, detail="spawn failed").needs_operator


@pytest.fixture
def one_pass(monkeypatch, capsys):
    """``apply``'s report of a pass whose outcomes are given (the pass itself is not run)."""

    def run(*outcomes: Outcome) -> int:
        monkeypatch.setattr(common, "pass_inputs", lambda *a, **k: None)
        monkeypatch.setattr(apply.loop, "apply_pass",
                            lambda inputs: PassResult(plan=Plan(), outcomes=outcomes))
        code = apply._pass_and_report(GlobalOptions(), apply.ApplyOptions(), None, frozenset())
        capsys.readouterr()
        return code

    return run


def test_apply_exits_3_for_an_exposed_server_or_an_unverified_model_found_while_acting(
        one_pass) -> None:
    """§4 `--once`/`apply`/`start` exit 3 when acting found an exposed server (§5) or a model that
    does not verify at spawn, as if the plan had found them; another failed action exits 1,
    and it outranks them (a failure that needs no operator is an error)."""
    assert one_pass(EXPOSED) == Exit.OPERATOR
    assert one_pass(_refused(Guard.MODEL_UNVERIFIED)) == Exit.OPERATOR
    assert one_pass(_refused(Guard.PROGRAM_UNVERIFIED), EXPOSED) == Exit.OPERATOR
    assert one_pass(_refused(Guard.PORT_NOT_ALLOWED)) == Exit.ERROR
    assert one_pass(EXPOSED, _refused(Guard.NOT_PROVEN)) == Exit.ERROR
    assert one_pass(Outcome(role="coder", verb=Verb.START, ok=True, pid=7)) == Exit.OK
