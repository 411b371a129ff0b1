"""``reconcile --once --metrics-file``: the textfile-collector file after real passes."""

from __future__ import annotations

import os

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import free_port
from tests.watch.test_metrics import DOCUMENTED

pytestmark = pytest.mark.e2e


def families(path) -> dict:
    return {f.name: f for f in text_string_to_metric_families(path.read_text())}


def test_once_writes_a_parseable_metrics_file_even_when_manifests_are_invalid(world):
    """--once replaces the file with every documented family; an invalid set shows its problems."""
    target = world.root / "textfile" / "reconciler.prom"
    target.parent.mkdir()
    world.node(budget="1GiB")
    world.model()
    world.role("chat", free_port())
    out = world.reconcile("--once", "--metrics-file", str(target))
    assert out.returncode == 0, out.stdout + out.stderr
    fams = families(target)
    assert DOCUMENTED - {"reconciler_probe_latency_seconds"} <= set(fams)
    statuses = {s.labels["status"]: s.value for s in fams["reconciler_role_status"].samples
                if s.labels["role"] == "chat"}
    assert sum(statuses.values()) == 1
    assert fams["reconciler_manifest_problems"].samples[0].value == 0
    assert fams["reconciler_reserved_bytes"].samples[0].value > 0
    assert target.stat().st_mode & 0o777 == 0o644

    world.write("role-chat.yaml", "apiVersion: reconciler/v1\nkind: InferenceSpec\n"
                "metadata: {name: chat}\nspec: {runtime: llamacpp, bogus: 1}\n")
    out = world.reconcile("--once", "--metrics-file", str(target))
    assert out.returncode == 1
    assert families(target)["reconciler_manifest_problems"].samples[0].value >= 1
    assert os.listdir(target.parent) == ["reconciler.prom"]
