"""deploy/: the systemd units, the Kubernetes DaemonSet and the Prometheus rules, checked by
their own tools (systemd-analyze verify, kubernetes-validate, promtool)."""

from __future__ import annotations

import os
import plistlib
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUBERNETES_VERSION = "1.33.0"  # the API the DaemonSet is validated against


def need(tool: str) -> str:
    found = shutil.which(tool)
    if found:
        return found
    message = f"{tool} is missing (`make tools` installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)  # in CI a missing checker is a broken build, not a skip
    pytest.skip(reason=message)


# ---------------------------------------------------------------- systemd


def verify_units(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([need("systemd-analyze"), "verify",
                           *sorted(str(p) for p in folder.iterdir())],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def units(tmp_path) -> Path:
    """The units, with the reconcile path pointing at this checkout's (verify wants it to exist)."""
    reconcile = Path(sys.executable).with_name("reconcile")
    for unit in (DEPLOY / "systemd").glob("reconciler-*"):
        text = unit.read_text().replace("/usr/local/bin/reconcile", str(reconcile))
        (tmp_path / unit.name).write_text(text)
    return tmp_path


def test_systemd_units_verify_clean(units) -> None:
    """systemd-analyze verify accepts every unit without a word."""
    done = verify_units(units)
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_systemd_verify_would_catch_a_mistake(units) -> None:
    """The check can fail: an unknown key is reported."""
    unit = units / "reconciler-once.service"
    unit.write_text(unit.read_text().replace("KillMode=process", "KillMode=process\nKilMode=none"))
    assert "Unknown key 'KilMode'" in verify_units(units).stderr


def test_the_timer_pulls_then_converges_this_node() -> None:
    """The timer's service pulls fast-forward only, then runs --once for the node named %H."""
    unit = (DEPLOY / "systemd" / "reconciler-once.service").read_text()
    assert "ExecStartPre=/usr/bin/git -C /etc/reconciler/fleet pull --ff-only" in unit
    assert "ExecStart=/usr/local/bin/reconcile --once --node %H" in unit
    assert "KillMode=process" in unit  # the servers outlive the run
    assert "PrivateDevices=" not in unit  # GPUs are devices
    timer = (DEPLOY / "systemd" / "reconciler-once.timer").read_text()
    assert "RandomizedDelaySec=" in timer


# ---------------------------------------------------------------- Kubernetes


def documents() -> list[dict]:
    return list(yaml.safe_load_all((DEPLOY / "kubernetes" / "reconciler.yaml").read_text()))


def test_kubernetes_manifests_validate_strictly() -> None:
    """Every document validates against the pinned Kubernetes API, unknown fields refused."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for doc in documents():
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_kubernetes_validation_would_catch_a_mistake() -> None:
    """The check can fail: a misspelt field of the pod spec is refused."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    daemonset = next(d for d in documents() if d["kind"] == "DaemonSet")
    daemonset["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, KUBERNETES_VERSION, strict=True)


def test_the_daemonset_runs_as_the_node_it_is_on() -> None:
    """Node name from the downward API, manifests from git-sync, the host's PIDs and network."""
    daemonset = next(d for d in documents() if d["kind"] == "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["hostPID"] is True and pod["hostNetwork"] is True
    containers = {c["name"]: c for c in pod["containers"]}
    env = {e["name"]: e for e in containers["reconciler"]["env"]}
    assert env["RECONCILER_NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "git-sync" in containers["git-sync"]["image"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["git"]
    assert volumes["state"]["hostPath"]["path"] == "/var/lib/reconciler"
    mounts = {m["name"]: m["mountPath"] for m in containers["reconciler"]["volumeMounts"]}
    assert mounts["state"] == "/var/lib/reconciler"
    assert any(a.startswith("--manifests=/git/") for a in containers["reconciler"]["args"])


# ---------------------------------------------------------------- Prometheus


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([need("promtool"), *args], capture_output=True, text=True,
                          timeout=60, cwd=DEPLOY / "prometheus")


def test_alert_rules_check() -> None:
    """promtool check rules: the rules parse and their expressions are valid."""
    done = promtool("check", "rules", "reconciler-rules.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_alert_rules_unit_tests() -> None:
    """promtool test rules: each alert fires for the right node, and only then."""
    done = promtool("test", "rules", "reconciler-rules.test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_would_catch_a_wrong_alert(tmp_path) -> None:
    """The rule tests can fail: an alert that fires for the wrong node is reported."""
    rules = (DEPLOY / "prometheus" / "reconciler-rules.yml").read_text()
    (tmp_path / "reconciler-rules.yml").write_text(
        rules.replace('reconciler_role_status{status="gave-up"} == 1',
                      'reconciler_role_status{status="gave-up"} == 0'))
    tests = (DEPLOY / "prometheus" / "reconciler-rules.test.yml").read_text()
    (tmp_path / "reconciler-rules.test.yml").write_text(tests)
    done = subprocess.run([need("promtool"), "test", "rules", "reconciler-rules.test.yml"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode != 0 and "ReconcilerRoleGaveUp" in done.stdout + done.stderr


def test_every_alert_names_the_node() -> None:
    """Every alert's summary says which node it is about."""
    groups = yaml.safe_load((DEPLOY / "prometheus" / "reconciler-rules.yml").read_text())["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == 7
    assert all("$labels.node" in r["annotations"]["summary"] for r in rules)


# ---------------------------------------------------------------- launchd (macOS)

LAUNCHD = DEPLOY / "launchd"
#: The launchd.plist(5) keys the jobs use, and the type each must have.
PLIST_KEYS = {
    "Label": str, "ProgramArguments": list, "UserName": str, "GroupName": str,
    "EnvironmentVariables": dict, "WorkingDirectory": str, "RunAtLoad": bool,
    "KeepAlive": (bool, dict), "ThrottleInterval": int, "ExitTimeOut": int,
    "AbandonProcessGroup": bool, "ProcessType": str, "Umask": int, "StartInterval": int,
    "StandardOutPath": str, "StandardErrorPath": str,
}
PROCESS_TYPES = {"Background", "Standard", "Adaptive", "Interactive"}
PATH_KEYS = ("WorkingDirectory", "StandardOutPath", "StandardErrorPath")


def plist(name: str) -> dict:
    with open(LAUNCHD / name, "rb") as f:
        return plistlib.load(f)


def plist_problems(job: dict) -> list[str]:
    """What launchd would refuse or misread: unknown keys, wrong types, paths it cannot use
    (launchd runs ProgramArguments without a shell: no ``~``, no ``$VAR``, absolute paths)."""
    out = []
    for key, value in job.items():
        want = PLIST_KEYS.get(key)
        if want is None:
            out.append(f"unknown key {key}")
        elif not isinstance(value, want) or (want is int and isinstance(value, bool)):
            out.append(f"{key} is {type(value).__name__}")
    args = job.get("ProgramArguments") or []
    if not args or not all(isinstance(a, str) for a in args) or not args[0].startswith("/"):
        out.append("ProgramArguments[0] is not an absolute path")
    for key in PATH_KEYS:
        if key in job and not str(job[key]).startswith("/"):
            out.append(f"{key} is not absolute")
    for text in [*args, *(str(job.get(k, "")) for k in PATH_KEYS),
                 *(job.get("EnvironmentVariables") or {}).values()]:
        if "~" in text or "$" in text:
            out.append(f"{text!r}: launchd expands neither ~ nor $VAR")
    if "ProcessType" in job and job["ProcessType"] not in PROCESS_TYPES:
        out.append(f"ProcessType {job['ProcessType']}")
    for key, value in (job.get("EnvironmentVariables") or {}).items():
        if not isinstance(value, str):
            out.append(f"EnvironmentVariables.{key} is {type(value).__name__}")
    if isinstance(job.get("KeepAlive"), dict) and not all(
            isinstance(v, bool) for v in job["KeepAlive"].values()):
        out.append("KeepAlive's conditions must be booleans")
    return out


def systemd_argv(unit: str, key: str) -> list[str]:
    """The argv of ``key=`` in a systemd unit (continuation lines joined), ``--node %H`` removed:
    launchd expands no %H, and the reconciler's default node is the host name anyway."""
    text = (DEPLOY / "systemd" / unit).read_text().replace("\\\n", " ")
    line = next(ln for ln in text.splitlines() if ln.startswith(key + "="))
    argv = shlex.split(line.split("=", 1)[1])
    if "--node" not in argv:
        return argv
    i = argv.index("--node")
    assert argv[i + 1] == "%H"
    return argv[:i] + argv[i + 2:]


@pytest.mark.parametrize("name", sorted(p.name for p in LAUNCHD.glob("*.plist")))
def test_launchd_jobs_parse_with_the_right_key_types(name) -> None:
    """Each plist loads (plistlib), is labelled by its file name, and every key is one launchd
    knows with the type it wants; programs and paths absolute, no ~ or $VAR (no shell)."""
    job = plist(name)
    assert job["Label"] + ".plist" == name
    assert plist_problems(job) == []


def test_the_launchd_check_would_catch_a_mistake() -> None:
    """The check can fail: a misspelt key, a string for an integer, ~ in a path, a relative
    program are each reported."""
    job = plist("local.reconciler.watch.plist")
    bad = {**job, "KeepAlve": True, "ThrottleInterval": "5", "StandardOutPath": "~/watch.log",
           "ProgramArguments": ["reconcile", "watch"]}
    problems = plist_problems(bad)
    assert "unknown key KeepAlve" in problems and "ThrottleInterval is str" in problems
    assert "StandardOutPath is not absolute" in problems
    assert "ProgramArguments[0] is not an absolute path" in problems


def test_the_launchd_daemon_runs_the_systemd_command_line_and_restarts_on_failure_only() -> None:
    """local.reconciler.watch: the systemd unit's `reconcile watch` argv (but the node flag);
    started at boot, restarted only on a failed exit (KeepAlive SuccessfulExit=false: SIGTERM's
    exit 0 stays stopped), its servers left running (AbandonProcessGroup), a service account."""
    job = plist("local.reconciler.watch.plist")
    assert job["ProgramArguments"] == systemd_argv("reconciler-watch.service", "ExecStart")
    assert job["RunAtLoad"] is True and job["KeepAlive"] == {"SuccessfulExit": False}
    assert job["AbandonProcessGroup"] is True and job["ExitTimeOut"] >= 120
    assert job["ProcessType"] == "Interactive"  # servers inherit it: not throttled
    assert job["UserName"] == "_reconciler" and job["Umask"] == 0o027


def test_the_launchd_interval_job_pulls_then_runs_once() -> None:
    """local.reconciler.once: every 120 s, the systemd once-unit's pull, then (only if it
    succeeded) its `reconcile --once` argv; no KeepAlive (a pass that ends is done)."""
    job = plist("local.reconciler.once.plist")
    assert job["StartInterval"] == 120 and "KeepAlive" not in job
    shell, dash_c, script = job["ProgramArguments"]
    assert (shell, dash_c) == ("/bin/sh", "-c")
    pull, once = script.split(" && exec ")
    assert shlex.split(pull) == systemd_argv("reconciler-once.service", "ExecStartPre")
    assert shlex.split(once) == systemd_argv("reconciler-once.service", "ExecStart")
    pulls = plist("local.reconciler.pull.plist")["ProgramArguments"]
    assert pulls == shlex.split(pull)
