"""Benchmark: fetching and unpacking a Program's release archive (BEHAVIOUR §14) against ``curl -o`` + ``unzip``.

A release-style ``.zip`` (deflated, as llama.cpp's release assets are) of a real
llama.cpp build: the prebuilt b10068 (``llama-server`` and its shared
libraries, /opt/reconciler-testbed/prebuilt) when it is there, else the
testbed's compiled ``llama-server`` and four 16 MiB libraries of random bytes.
Debian's nginx serves it on loopback (``sendfile``). Alternately, ``--runs``
times each, into the same filesystem:

* ``curl -s -o a.zip URL && unzip -q a.zip -d DIR`` (two processes; no digest
  checked anywhere);
* ours: ``fetchprogram.run`` — what the detached fetch process does: the
  archive downloaded with its sha256 computed on the way, fsynced and renamed
  into the blob cache, unpacked (each member checked), every file's sha256
  compared with the Program's list, the tree renamed into place.

The best of each is compared; the ratio printed is curl+unzip's time over ours
(goal ≥ 0.9). Files go to a tmpfs (``/dev/shm``) when it has room, so that a
shared machine's disk does not decide the figures; ``--dir`` chooses another
place. The load average is printed with the figures.

``--kind tar.gz``: the same files in a gzipped tar, against ``curl -o`` +
``tar -xzf`` (llama.cpp's newer Linux assets are ``.tar.gz``).

Run: ``.venv/bin/python bench/bench_program_fetch.py [--runs 5] [--kind zip] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_fetch import NGINX, start_nginx  # noqa: E402
from reconciler.models import fetchprogram  # noqa: E402

PREBUILT = Path("/opt/reconciler-testbed/prebuilt")
COMPILED = Path("/opt/reconciler-testbed/bin/llama-server")


def release_files(work: Path) -> Path:
    """The directory whose files make the release: the prebuilt build, or a stand-in."""
    if (PREBUILT / "llama-server").exists():
        return PREBUILT
    root = work / "release"
    root.mkdir()
    if COMPILED.exists():
        shutil.copy(COMPILED, root / "llama-server")
    else:
        (root / "llama-server").write_bytes(os.urandom(15 << 20))
    for i in range(4):
        (root / f"libggml-{i}.so").write_bytes(os.urandom(16 << 20))
    return root


def make_zip(root: Path, out: Path, top: str) -> tuple[tuple[str, str, int], ...]:
    """``out``: ``top/<file>`` for every file of ``root``, deflated; the Program's file list."""
    files = []
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for path in sorted(p for p in root.iterdir() if p.is_file()):
            data = path.read_bytes()
            info = zipfile.ZipInfo(f"{top}/{path.name}", date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100755 if os.access(path, os.X_OK) else 0o100644) << 16
            z.writestr(info, data)
            files.append((path.name, hashlib.sha256(data).hexdigest(), len(data)))
    return tuple(files)


def make_tar_gz(root: Path, out: Path, top: str) -> tuple[tuple[str, str, int], ...]:
    """``out``: ``top/<file>`` for every file of ``root``, in a gzipped tar; the file list."""
    files = []
    with tarfile.open(out, "w:gz", compresslevel=6) as tar:
        for path in sorted(p for p in root.iterdir() if p.is_file()):
            data = path.read_bytes()
            info = tarfile.TarInfo(f"{top}/{path.name}")
            info.size, info.mode = len(data), 0o755 if os.access(path, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))
            files.append((path.name, hashlib.sha256(data).hexdigest(), len(data)))
    return tuple(files)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kind", choices=("zip", "tar.gz"), default="zip",
                        help="the archive: .zip against unzip, or .tar.gz against tar -xzf")
    parser.add_argument("--dir", help="where the files go (default: /dev/shm if it has room)")
    args = parser.parse_args()
    tool = "unzip" if args.kind == "zip" else "tar"
    if not os.path.exists(NGINX) or not shutil.which("curl") or not shutil.which(tool):
        print(f"needs nginx, curl and {tool} (apt-get install nginx curl {tool})")
        return 1
    base = args.dir
    if base is None and os.path.isdir("/dev/shm") and shutil.disk_usage("/dev/shm").free > 2 << 30:
        base = "/dev/shm"
    work = Path(tempfile.mkdtemp(prefix="bench-program-fetch-", dir=base))
    print(f"files in {work}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"{os.cpu_count()} CPUs")
    try:
        www = work / "www"
        www.mkdir()
        archive = www / f"llama-b10068-bin-ubuntu-x64.{args.kind}"
        files = (make_zip if args.kind == "zip" else make_tar_gz)(
            release_files(work), archive, "build/bin")
        data = archive.read_bytes()
        sha, size = hashlib.sha256(data).hexdigest(), len(data)
        unpacked = sum(s for _, _, s in files)
        print(f"archive: {len(files)} files, {unpacked / 2**20:.1f} MiB unpacked, "
              f"{size / 2**20:.1f} MiB deflated")
        tmp = work / "nginx"
        tmp.mkdir()
        proc, port = start_nginx(www, tmp)
        try:
            url = f"http://127.0.0.1:{port}/{archive.name}"
            theirs, ours = [], []
            for i in range(args.runs):
                out = work / "curl"
                out.mkdir()
                t = time.perf_counter()
                subprocess.run(["curl", "-s", "-o", str(out / "a"), url], check=True)
                (out / "tree").mkdir()
                unpack = (["unzip", "-q", str(out / "a"), "-d", str(out / "tree")]
                          if args.kind == "zip" else
                          ["tar", "-xzf", str(out / "a"), "-C", str(out / "tree")])
                subprocess.run(unpack, check=True)
                theirs.append(time.perf_counter() - t)
                shutil.rmtree(out)
                cache = work / "cache"
                job = fetchprogram.ProgramJob(
                    program="llama-b10068", generation=f"g{i}", cache=str(cache),
                    tree=str(cache / "programs" / "llama-b10068" / "0123456789abcdef"),
                    url=url, sha256=sha, size=size, strip=2, files=files)
                t = time.perf_counter()
                got = fetchprogram.run(job)
                ours.append(time.perf_counter() - t)
                assert got.ok, got.detail
                shutil.rmtree(cache)
        finally:
            proc.kill()
            proc.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best_theirs, best_ours = min(theirs), min(ours)
    print(f"curl -o + {tool}: best {best_theirs:.3f} s; runs "
          f"{', '.join(f'{x:.3f}' for x in theirs)}")
    print(f"ours (fetch + sha256 + unpack + verify + rename): best {best_ours:.3f} s; runs "
          f"{', '.join(f'{x:.3f}' for x in ours)}")
    ratio = best_theirs / best_ours
    print(f"ratio curl+{tool} / ours: {ratio:.2f}× (goal ≥ 0.90×): "
          f"{'PASS' if ratio >= 0.9 else 'FAIL'}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if ratio >= 0.9 else 1


if __name__ == "__main__":
    raise SystemExit(main())
