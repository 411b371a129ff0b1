"""Mutants of §13's staging of Model and Program documents (issue 30's gap: a new build
under the same name reached every node at once).

Each breaks one rule: a document change is staged like a spec change, a waiting role
keeps its commit's documents beside HEAD's, and keeping them changes nothing the server,
the instance id or the router sees; `fleet --diff` marks what a Rollout stages. The test
that kills each: tests/rollout/test_documents_staged.py.
"""

from __future__ import annotations

from tests.mutation.mutant import mutant

DOCS = "tests/rollout/test_documents_staged.py"

MUTANTS = (
    mutant("planner/rollout.py", "document-change-not-staged",
           "    return Version(spec=spec, documents=tuple(docs))",
           "    return Version(spec=spec, documents=())",
           "§13: a new llama.cpp build (or new weights) under the same name reaches every "
           "node at once, canary or not", DOCS),
    mutant("engine/rolloutpass.py", "kept-role-runs-heads-documents",
           "            if doc is None or table.get(name) == doc:",
           "            if True:",
           "§13: a waiting node's role is resolved with HEAD's Program and Model: it restarts "
           "on the new build before its wave", DOCS),
    mutant("planner/identity.py", "kept-model-name-in-instance-id",
           'document_name(role.model or ""), role.serve.address,',
           'role.model or "", role.serve.address,',
           "§13/§3: a role kept on its commit's Model beside HEAD's gets a new instance id: "
           "a second server, the first one orphaned", DOCS),
    mutant("core/desired.py", "kept-program-name-in-launch",
           '        return f"{document_name(self.name)} {self.version} sha256:{self.digest[:16]}"',
           '        return f"{self.name} {self.version} sha256:{self.digest[:16]}"',
           "§13/§14: a role kept on its commit's Program beside HEAD's restarts (its "
           "RECONCILER_PROGRAM names the kept name)", DOCS),
    mutant("fleet/fleetdiff.py", "diff-marks-a-stop-staged",
           "        if spec is not None and spec.state is not WantedState.STOPPED:",
           "        if spec is not None:",
           "§13: `fleet --diff` says a stop waits for the rollout: a reviewer thinks a "
           "stop of a bad change will wait for a wave", DOCS),
)
