"""Benchmark: ``reconcile --once`` with a rollout in effect vs without (issue 30: ≤ 1.2×).

One checkout of a repository with 1,000 commits, one state directory, the same
real servers (the testbed's tiny model, ``--roles`` of them). Two branches:

* ``plain``: the manifests, no Rollout: the pass stages nothing.
* ``staged``: 1,000 commits (unrelated files after the first), a Rollout of every
  role; its last commit changes every role's ctx, and the node's turn has not
  come (``$RECONCILER_ROLLOUT_NOW`` before the window): every pass reads the
  previous revision's manifests from git (``git archive``), keeps each role at
  it and restarts nothing.

Whole-process runs, interleaved (``git checkout`` between them, untimed; a pass on
``plain`` forgets ``rollout.json``, so each staged run follows an untimed pass at
``staged~1`` that records it), median of ``--runs``; both print "No changes". The load average is printed with the
figures: run it on an otherwise idle machine.

Run: ``.venv/bin/python bench/bench_rollout_once.py [--roles 10] [--runs 9]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_once import (  # noqa: E402
    medians,
    servers_root,
    timed_in_sync,
    wait_in_sync,
    write_manifests,
)

ROLLOUT = """---
apiVersion: reconciler/v1
kind: Rollout
metadata: {name: up}
spec:
  start: "2026-12-02T14:00:00Z"
  duration: 3h
  waves: [{name: canary, canary: true, node_selector: {match_labels: {ring: canary}}}]
"""
BEFORE = "2026-12-02T13:00:00Z"  # before the window: a staged change waits
GIT_ENV = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True,
                          text=True, env={**os.environ, **GIT_ENV}, check=True)
    return done.stdout


def build_repo(root: Path, roles: int, commits: int) -> Path:
    """The checkout: branch plain (one commit), branch staged (``commits`` commits)."""
    repo = root / "repo"
    repo.mkdir()
    manifests = write_manifests(repo, roles)
    text = (manifests / "all.yaml").read_text()
    git(repo, "init", "-q", "-b", "plain")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "plain")
    git(repo, "checkout", "-q", "-b", "staged")
    (manifests / "all.yaml").write_text(text + ROLLOUT)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a rollout")
    # the unrelated commits in between, in one fast-import stream
    stream = []
    for i in range(commits - 3):
        body = f"note {i}\n"
        stream.append(f"commit refs/heads/staged\ncommitter b <b@b> {1700000000 + i} +0000\n"
                      f"data 5\nnote\n{'from refs/heads/staged^0' if i == 0 else ''}\n"
                      f"M 644 inline notes.txt\ndata {len(body)}\n{body}\n")
    git(repo, "fast-import", "--quiet", "--force", stdin="".join(stream))
    git(repo, "reset", "-q", "--hard", "staged")
    (manifests / "all.yaml").write_text(text.replace("ctx: 256", "ctx: 512") + ROLLOUT)
    git(repo, "commit", "-qam", "ctx 512 for every role: staged")
    assert int(git(repo, "rev-list", "--count", "HEAD")) == commits
    return manifests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roles", type=int, default=10)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--commits", type=int, default=1000)
    args = parser.parse_args()
    with servers_root("bench_rollout_once") as root:
        manifests = build_repo(root, args.roles, args.commits)
        repo = manifests.parent
        env = {**os.environ, "RECONCILER_STATE_DIR": str(root / "state"),
               "RECONCILER_ROLLOUT_NOW": BEFORE, "PYTHONPYCACHEPREFIX": str(root / "pycache")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        once = [sys.executable, "-m", "reconciler", "-f", str(manifests), "--once", "--node",
                "bench"]
        git(repo, "checkout", "-q", "plain")
        wait_in_sync(once, env, 90)  # every server up, in sync

        def plain() -> float:
            git(repo, "checkout", "-q", "plain")
            return timed_in_sync(once, env)[0]

        def staged() -> float:  # (plain forgot rollout.json: no Rollout there)
            git(repo, "checkout", "-q", "staged~1")  # the node records HEAD~1
            subprocess.run(once, capture_output=True, text=True, env=env, check=True)
            git(repo, "checkout", "-q", "staged")
            t, plan = timed_in_sync(once, env)
            assert "rollout: up: the rollout starts at" in plan, plan
            return t

        without, staged_median = medians(args.runs, plain, staged)
        print(f"reconcile --once, {args.roles} servers in sync, {args.commits} commits:")
        print(f"  without a rollout: median {without * 1000:.0f} ms over {args.runs} runs")
        print(f"  a rollout, every role waiting (previous revision read from git): "
              f"median {staged_median * 1000:.0f} ms")
        print(f"  ratio: {staged_median / without:.2f}x (goal <= 1.2x); load average "
              f"{os.getloadavg()[0]:.2f}")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
