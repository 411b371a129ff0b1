"""What a pass is given to work with, as Protocols: the store, the verifier, the gate (SHELL; no IO).

``PassInputs`` (``engine/loop.py``) carries three collaborators that tests and
the daemon swap: each is typed here by what the pass asks of it, not by the
class that answers today.

* ``PassStore``: what a pass, its rooms and the daemon's pass policy read and
  write of the state store (``state/store.Store`` on SQLite): records, fetches,
  events, the operator starts a ``reconcile start`` queued, and the stamps the
  verifier keeps (``modelstore.StampStore``'s four);
* ``Verifier``: a model checked for real right before a spawn (§1.1;
  ``modelstore.Verifier``, one per process, remembers what it already hashed);
* ``Gate``: the router's say before a stop and after a spawn (§9;
  ``router/service.Router``): close and drain a role's route, watch a new server.

``tests/loop/test_seams.py`` holds each implementation to its Protocol's
methods and signatures. Imports below are for the type checker only, so the
pass pays nothing for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from reconciler.core.decisions import Decision
    from reconciler.core.desired import ModelSpec
    from reconciler.core.events import Event
    from reconciler.core.observed import FetchRecord, ModelCheck, RoleRecord
    from reconciler.models.modelstore import Stamp


@runtime_checkable
class PassStore(Protocol):
    """The state store as a pass uses it (``state/store.Store``)."""

    def roles(self) -> tuple[RoleRecord, ...]:
        """Every role's record."""

    def role(self, name: str) -> RoleRecord | None:
        """One role's record."""

    def put_role(self, record: RoleRecord) -> None:
        """Write a role's whole record in one statement."""

    def delete_role(self, name: str) -> None:
        """Forget a role."""

    def fetches(self) -> tuple[FetchRecord, ...]:
        """The fetch processes started (§1.6)."""

    def put_fetch(self, record: FetchRecord) -> None:
        """Record a fetch process."""

    def delete_fetch(self, model: str) -> None:
        """Forget a Model's fetch."""

    def add_event(self, event: Event) -> None:
        """Append to the event log."""

    def last_events(self) -> dict[str, Event]:
        """Each role's newest event."""

    def take_starts(self) -> frozenset[str]:
        """The operator starts queued by ``reconcile start``, taken (removed)."""

    def operator_start(self, name: str, at: float | None = None) -> str:
        """Apply an operator start to a role's record; the words for what it cleared."""

    def sticky_mismatches(self) -> dict[str, str]:
        """Model → the recorded hash mismatch (§1.1), for the observer."""

    def get_stamps(self, model: str) -> dict[str, Stamp]:
        """A Model's file stamps (``modelstore.StampStore``)."""

    def put_stamps(self, model: str, stamps: dict[str, Stamp]) -> None:
        """Replace a Model's file stamps."""

    def get_sticky(self, model: str) -> str | None:
        """A Model's recorded mismatch."""

    def set_sticky(self, model: str, detail: str | None) -> None:
        """Record (or clear, with None) a Model's mismatch."""


@runtime_checkable
class Verifier(Protocol):
    """§1.1 a Model checked right before a spawn (``modelstore.Verifier``)."""

    def verify(self, spec: ModelSpec, full: bool = False) -> ModelCheck:
        """VERIFIED, or why not; ``full``: hash every file whatever the stamps say."""


@runtime_checkable
class Gate(Protocol):
    """§9 the router around the executor's stops and spawns (``router/service.Router``)."""

    def before_stop(self, decision: Decision) -> str | None:
        """Close the role's route and drain it; why the stop must not happen (an idle stop
        with requests in flight), else None."""

    def spawned(self, decision: Decision) -> None:
        """A server was just spawned: its waiters go the moment it answers."""
