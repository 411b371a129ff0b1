"""What a pass sees of a fetch (BEHAVIOUR §1.6): the cache, the process, the last result."""

from __future__ import annotations

import json
import os
from pathlib import Path

from reconciler.core.desired import (
    Desired, FetchConfig, Mode, ModelFile, ModelFormat, ModelSpec, NodeConfig, RoleSpec, Runtime,
    ServeSpec,
)
from reconciler.core.observed import FetchState
from reconciler.manifests.fleet import models_on
from reconciler.models.fetchpolicy import blob_path, partial_path
from reconciler.world import fetches

SHA = "b" * 64


def desired(cache: Path, token_file: str | None = None) -> Desired:
    node = NodeConfig(name="n", fetch=FetchConfig(cache=str(cache), min_free=0,
                                                  hf_token_file=token_file))
    model = ModelSpec(name="m", format=ModelFormat.GGUF, shards=(
        ModelFile(path="m.gguf", sha256=SHA, size=1000, url="https://x.example/m.gguf"),))
    role = RoleSpec(name="r", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="m",
                    serve=ServeSpec(port=8090))
    return Desired(roles=(role,), models=models_on((model,), node), node=node)


def result(cache: Path, d: Desired, failure: str | None, age: float = 0.0) -> None:
    path = Path(fetches.job_path(str(cache), "m").removesuffix(".json") + ".result.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    gen = d.models[0].fetch_generation(d.node.fetch.hf_endpoint)
    path.write_text(json.dumps({"ok": failure is None, "failure": failure,
                                "detail": f"it said {failure}", "generation": gen}))
    when = os.stat(path).st_mtime - age
    os.utime(path, (when, when))


def seen(cache: Path, d: Desired, now: float | None = None):
    import time

    (obs,) = fetches.observe(d, (), time.time() if now is None else now)
    return obs


def test_missing_partial_and_done(tmp_path: Path) -> None:
    """Nothing: all missing; a partial file counts as done bytes; blob and link: done."""
    d = desired(tmp_path)
    obs = seen(tmp_path, d)
    assert (obs.state, obs.total, obs.missing) == (FetchState.NEEDED, 1000, 1000)
    part = Path(partial_path(str(tmp_path), SHA))
    part.parent.mkdir(parents=True)
    part.write_bytes(b"x" * 400)
    assert seen(tmp_path, d).missing == 600
    blob = Path(blob_path(str(tmp_path), SHA))
    blob.parent.mkdir(parents=True)
    part.write_bytes(b"x" * 1000)
    part.rename(blob)
    assert seen(tmp_path, d).state is FetchState.NEEDED  # not linked into the tree yet
    tree = Path(d.models[0].root)
    tree.mkdir(parents=True)
    os.link(blob, tree / "m.gguf")
    assert seen(tmp_path, d).state is FetchState.DONE


def test_the_last_result_decides_failed_backoff_running_or_needed(tmp_path: Path) -> None:
    """§1.6 a fetch's last result decides its state: a mismatch fails for good, a network error
    backs off then is needed again, busy is running."""
    d = desired(tmp_path)
    result(tmp_path, d, "mismatch", age=3600)
    assert seen(tmp_path, d).state is FetchState.FAILED  # sticky: however old
    result(tmp_path, d, "network")
    assert seen(tmp_path, d).state is FetchState.BACKOFF
    result(tmp_path, d, "network", age=60)
    assert seen(tmp_path, d).state is FetchState.NEEDED
    result(tmp_path, d, "busy")
    assert seen(tmp_path, d).state is FetchState.RUNNING  # `models fetch` holds the files


def test_a_token_failure_lasts_while_the_file_is_unreadable(tmp_path: Path) -> None:
    """§1.6 a token failure lasts while the token file cannot be read, and clears once it can."""
    token = tmp_path / "token"
    d = desired(tmp_path, str(token))
    result(tmp_path, d, "token", age=3600)
    assert seen(tmp_path, d).state is FetchState.FAILED
    token.write_text("hf_x")
    assert seen(tmp_path, d).state is FetchState.NEEDED
