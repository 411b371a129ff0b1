"""Mutants of records by kind (issue 27: what the store keeps for a verb is that verb's own):
a record's parts are built whole, read back whole, and never of another role's kind."""

from __future__ import annotations

from tests.mutation.mutant import mutant

OB, RO, SR = "core/observed.py", "planner/records.py", "state/storerows.py"

MUTANTS = (
    mutant(OB, "create-time-without-pid",
           "        if create_time is not None:\n            raise",
           "        if False:\n            raise",
           "§3: a record holding a create time and no pid is built (it names no server)",
           "tests/records"),
    mutant(OB, "load-ours-without-tag",
           "        if we_loaded:\n            raise",
           "        if False:\n            raise",
           "§2: a load taken for ours without the tag to unload is built",
           "tests/safety", "tests/records"),
    mutant(SR, "create-time-lost-on-read",
           'ServerProcess(pid=row["pid"], create_time=row["create_time"])',
           'ServerProcess(pid=row["pid"], create_time=None)',
           "§3: a recorded server's create time is lost when the store is read: its ownership "
           "is never proven again (never stopped, re-adopted beside itself)",
           "tests/store"),
    mutant(SR, "load-without-tag-read",
           'if row["model_tag"] else None)',
           'if row["model_tag"] or row["we_loaded"] else None)',
           "§3: an old row with a load of ours and no tag reads as a load part without a tag",
           "tests/store"),
    mutant(RO, "start-records-a-load",
           "load=LoadedModel(tag=decision.model_tag) if decision.model_tag else None,",
           "load=LoadedModel(tag=spec.name),",
           "§2: a server's first record holds a load of a model it never loaded",
           "tests/records"),
    mutant(RO, "spawn-loses-create-time",
           "process=ServerProcess(pid=facts.pid, create_time=facts.create_time)",
           "process=ServerProcess(pid=facts.pid)",
           "§3: a started server is recorded without its create time: never proven ours, "
           "never stopped", "tests/records"),
)

# The planner's memo of a placed launch's generation (issue 27 item 6: worked out once with
# the launch, not once per pass).
MUTANTS += (
    mutant("planner/launches.py", "placed-generation-without-restarted-at",
           "found.generation = generations.current(spec, found.digest, None)",
           "found.generation = found.digest",
           "§4/§7.1: a role with restarted_at placed on new devices records a generation that "
           "is never its own: restarted again on every pass", "tests/devices", "tests/plan"),
)
