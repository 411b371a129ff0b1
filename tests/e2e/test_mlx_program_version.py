"""§14 the version of a real ``mlx_lm.server`` checked against its Program's ``version``.

mlx-lm says no version over HTTP: the observer reads the ``mlx_lm`` dist-info beside the
``mlx`` the running server has mapped (``world/pkgversion.py``). The testbed's launcher
script is copied into the test's own directory and pinned with ``programs add``.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.e2e.conftest import free_port, wait_for
from tests.e2e.test_mlx_once import (  # noqa: F401 (mlx_world: the fixture)
    MLX_SERVER, converge, mlx_world, status, voice, wait_running)

pytestmark = [pytest.mark.mlx, pytest.mark.e2e]

#: The mlx-lm the testbed installs (testbed/setup_mlx.sh).
MLX_LM_VERSION = "0.32.2"


def _pin(world, version: str) -> None:
    bindir = world.root / "mlx-bin"
    bindir.mkdir(exist_ok=True)
    os.chmod(bindir, 0o755)
    copy = bindir / "mlx_lm.server"
    if not copy.exists():
        shutil.copy(MLX_SERVER, copy)
        os.chmod(copy, 0o755)
    out = world.reconcile("programs", "add", str(copy), "--runtime", "mlx-lm", "--version",
                          version, "--name", "mlx", "-o", str(world.manifests / "program.yaml"))
    assert out.returncode == 0, out.stderr


def test_an_mlx_program_version_is_confirmed_from_the_running_server(mlx_world):
    """§14: pinned as its real version (0.32.2) the server runs and nothing is said; the same
    files pinned as 0.31.0 restart once and the role is degraded, naming the version the
    running server's mlx_lm package has."""
    _pin(mlx_world, MLX_LM_VERSION)
    mlx_world.node(mlx_program="mlx")
    port = free_port()
    voice(mlx_world, port)
    converge(mlx_world)
    wait_running(mlx_world)
    out = converge(mlx_world).stdout
    row = status(mlx_world)
    assert row["status"] == "running", row
    assert "not confirmed" not in row["detail"] + out and "version_mismatch" not in out, out

    _pin(mlx_world, "0.31.0")
    assert "restart voice" in converge(mlx_world).stdout
    rows = [status(mlx_world)]

    def degraded() -> bool:
        converge(mlx_world)
        rows.append(status(mlx_world))
        return rows[-1]["status"] == "degraded"

    assert wait_for(degraded, 30, interval=0.5), [(r["status"], r["detail"]) for r in rows[-3:]]
    detail = rows[-1]["detail"]
    assert f"program mlx is version 0.31.0, the server reports {MLX_LM_VERSION}" in detail, detail
