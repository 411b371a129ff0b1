#!/usr/bin/env python3
"""llama-server command line -> xllamacpp's embedded llama.cpp HTTP server.

Test/demo support, not part of the reconciler.  xllamacpp (PyPI) ships
llama.cpp's own C++ HTTP server inside a Python extension but has no command
line.  This launcher accepts llama-server's flags, maps them onto
xllamacpp.CommonParams and runs xllamacpp.Server in the foreground, so the
reconciler can launch it exactly as it launches a real `llama-server`.

Behaviour kept faithful to llama-server:
  * the HTTP listener is up before the model loads: /health answers 503
    "Loading model" while loading, then 200;
  * unknown flags or bad values: "error: ..." on stderr, exit 1;
  * a model that cannot be loaded / a port that cannot be bound: exit 1;
  * SIGTERM/SIGINT while loading: default action (llama-server installs its
    handlers only after the model is loaded); once serving: graceful
    shutdown, exit 0; a second signal exits at once with status 1.

Default threads: 1 (CI machines have 2 cores and tests run many servers).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

PROG = "llama-server"

# flag spellings -> (dest, arity).  Arity 0 = switch.
_FLAGS: dict[str, tuple[str, int]] = {}


def _flag(dest: str, arity: int, *spellings: str) -> None:
    for s in spellings:
        _FLAGS[s] = (dest, arity)


_flag("model", 1, "-m", "--model")
_flag("host", 1, "--host")
_flag("port", 1, "--port")
_flag("ctx_size", 1, "-c", "--ctx-size")
_flag("alias", 1, "-a", "--alias")
_flag("threads", 1, "-t", "--threads")
_flag("threads_batch", 1, "-tb", "--threads-batch")
_flag("parallel", 1, "-np", "--parallel")
_flag("cache_type_k", 1, "-ctk", "--cache-type-k")
_flag("cache_type_v", 1, "-ctv", "--cache-type-v")
_flag("model_draft", 1, "-md", "--model-draft")
_flag("n_gpu_layers", 1, "-ngl", "--gpu-layers", "--n-gpu-layers")
_flag("batch_size", 1, "-b", "--batch-size")
_flag("ubatch_size", 1, "-ub", "--ubatch-size")
_flag("temp", 1, "--temp")
_flag("top_p", 1, "--top-p")
_flag("top_k", 1, "--top-k")
_flag("seed", 1, "-s", "--seed")
_flag("repeat_penalty", 1, "--repeat-penalty")
_flag("flash_attn", 1, "-fa", "--flash-attn")
_flag("cont_batching", 0, "-cb", "--cont-batching")
_flag("no_cont_batching", 0, "-nocb", "--no-cont-batching")
_flag("jinja", 0, "--jinja")
_flag("no_jinja", 0, "--no-jinja")
_flag("metrics", 0, "--metrics")
_flag("webui", 0, "--webui")
_flag("no_webui", 0, "--no-webui")
_flag("help", 0, "-h", "--help", "--usage")
_flag("version", 0, "--version")

CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
FLASH_ATTN = {"on": "ENABLED", "off": "DISABLED", "auto": "AUTO"}


class UsageError(Exception):
    pass


def usage() -> str:
    seen: dict[str, list[str]] = {}
    for s, (dest, arity) in _FLAGS.items():
        seen.setdefault(dest + ("" if arity == 0 else " N"), []).append(s)
    lines = [f"usage: {PROG} [options]  (xllamacpp shim; test/demo support)", ""]
    for key, spellings in seen.items():
        arg = " VALUE" if key.endswith(" N") else ""
        lines.append("  " + ", ".join(spellings) + arg)
    return "\n".join(lines)


def parse_args(argv: list[str]) -> dict[str, object]:
    """Parse like llama.cpp's common arg parser: exact spellings only (no
    prefix abbreviations), `--flag value` or `--flag=value`."""
    opts: dict[str, object] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        value = None
        if arg.startswith("--") and "=" in arg:
            arg, value = arg.split("=", 1)
        if arg not in _FLAGS:
            raise UsageError(f"invalid argument: {argv[i]}")
        dest, arity = _FLAGS[arg]
        if arity == 0:
            if value is not None:
                raise UsageError(f"argument {arg} takes no value")
            opts[dest] = True
        else:
            if value is None:
                i += 1
                if i >= len(argv):
                    raise UsageError(f"expected value for argument {arg}")
                value = argv[i]
            opts[dest] = value
        i += 1
    return opts


def _int(opts: dict, key: str, flag: str) -> int | None:
    if key not in opts:
        return None
    try:
        return int(str(opts[key]), 10)
    except ValueError:
        raise UsageError(f"invalid value for {flag}: {opts[key]!r}") from None


def _float(opts: dict, key: str, flag: str) -> float | None:
    if key not in opts:
        return None
    try:
        return float(str(opts[key]))
    except ValueError:
        raise UsageError(f"invalid value for {flag}: {opts[key]!r}") from None


def build_params(xl, opts: dict):
    """Map parsed flags onto xllamacpp.CommonParams."""
    p = xl.CommonParams()
    model = str(opts.get("model") or "")
    if not model:
        raise UsageError("--model is required (this shim has no router mode)")
    p.model.path = model
    p.hostnames = [str(opts.get("host", "127.0.0.1"))]
    port = _int(opts, "port", "--port")
    p.port = 8080 if port is None else port
    if not 0 <= p.port <= 65535:
        raise UsageError(f"invalid value for --port: {port}")
    ctx = _int(opts, "ctx_size", "--ctx-size")
    if ctx is not None:
        p.n_ctx = ctx
    if "alias" in opts:
        p.model_alias = {a.strip() for a in str(opts["alias"]).split(",") if a.strip()}

    threads = _int(opts, "threads", "--threads")
    p.cpuparams.n_threads = 1 if threads is None else threads
    tb = _int(opts, "threads_batch", "--threads-batch")
    p.cpuparams_batch.n_threads = p.cpuparams.n_threads if tb is None else tb
    np_ = _int(opts, "parallel", "--parallel")
    if np_ is not None:
        p.n_parallel = np_

    for key, flag in (("cache_type_k", "--cache-type-k"), ("cache_type_v", "--cache-type-v")):
        if key in opts:
            v = str(opts[key]).lower()
            if v not in CACHE_TYPES:
                raise UsageError(f"unsupported cache type for {flag}: {opts[key]} "
                                 f"(allowed: {', '.join(CACHE_TYPES)})")
            setattr(p, key, getattr(xl.ggml_type, "GGML_TYPE_" + v.upper()))

    if "model_draft" in opts:
        draft = p.speculative.draft
        draft.mparams.path = str(opts["model_draft"])
        draft.cpuparams.n_threads = p.cpuparams.n_threads
        draft.cpuparams_batch.n_threads = p.cpuparams_batch.n_threads
        p.speculative.types = [xl.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]

    if "n_gpu_layers" in opts:
        v = str(opts["n_gpu_layers"])
        # CPU-only build: the value is accepted and kept, it has no effect.
        p.n_gpu_layers = {"auto": -1, "all": 999}[v] if v in ("auto", "all") \
            else _int(opts, "n_gpu_layers", "--n-gpu-layers")
    b = _int(opts, "batch_size", "--batch-size")
    if b is not None:
        p.n_batch = b
    ub = _int(opts, "ubatch_size", "--ubatch-size")
    if ub is not None:
        p.n_ubatch = ub

    s = p.sampling
    for key, flag, attr in (("temp", "--temp", "temp"), ("top_p", "--top-p", "top_p"),
                            ("repeat_penalty", "--repeat-penalty", "penalty_repeat")):
        v = _float(opts, key, flag)
        if v is not None:
            setattr(s, attr, v)
    tk = _int(opts, "top_k", "--top-k")
    if tk is not None:
        s.top_k = tk
    seed = _int(opts, "seed", "--seed")
    if seed is not None:
        s.seed = seed & 0xFFFFFFFF  # -1 = LLAMA_DEFAULT_SEED (random)

    if "flash_attn" in opts:
        v = str(opts["flash_attn"]).lower()
        if v not in FLASH_ATTN:
            raise UsageError(f"unknown value for --flash-attn: '{opts['flash_attn']}' "
                             "(expected on|off|auto)")
        p.flash_attn_type = getattr(xl.llama_flash_attn_type,
                                    "LLAMA_FLASH_ATTN_TYPE_" + FLASH_ATTN[v])
    if opts.get("cont_batching"):
        p.cont_batching = True
    if opts.get("no_cont_batching"):
        p.cont_batching = False
    if opts.get("jinja"):
        p.use_jinja = True
    if opts.get("no_jinja"):
        p.use_jinja = False
    if opts.get("metrics"):
        p.endpoint_metrics = True
    if opts.get("webui"):
        p.ui = True
    if opts.get("no_webui"):
        p.ui = False
    return p


def err(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    # llama-server installs its signal handlers only once the model is
    # loaded; until then SIGTERM/SIGINT simply terminate the process.
    # (Server() below holds the GIL while loading, so a Python handler could
    # not run before it returns anyway.)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    try:
        opts = parse_args(argv)
        if opts.get("help"):
            print(usage())
            return 0
        import xllamacpp as xl
        if opts.get("version"):
            info = xl.BUILD_INFO
            print(f"version: {info.get('build_number')} ({info.get('commit')}) "
                  f"xllamacpp {getattr(xl, '__version__', '?')}", file=sys.stderr)
            print(f"built with {info.get('compiler')} for {info.get('build_target')}",
                  file=sys.stderr)
            return 0
        params = build_params(xl, opts)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1

    for label, path in (("model", params.model.path),
                        ("draft model", str(opts.get("model_draft") or ""))):
        if path and not os.path.isfile(path):
            err(f"error: {label} file not found: {path}")
            return 1
        if path and not os.access(path, os.R_OK):
            err(f"error: {label} file not readable: {path}")
            return 1

    t0 = time.monotonic()
    try:
        server = xl.Server(params)  # listens, loads the model, then returns
    except Exception as e:  # bind failure, load failure, bad params
        err(f"error: failed to start server: {e}")
        return 1

    class _Stop(Exception):
        pass

    def on_signal(signum, _frame):
        raise _Stop(signum)

    def on_second_signal(signum, _frame):
        err("received second interrupt, terminating immediately")
        os._exit(1)

    try:
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        err(f"server is listening on {server.listening_address} "
            f"(model loaded in {time.monotonic() - t0:.3f}s, pid {os.getpid()})")
        while True:
            time.sleep(3600)
    except _Stop:
        pass
    signal.signal(signal.SIGTERM, on_second_signal)
    signal.signal(signal.SIGINT, on_second_signal)

    err("shutting down")
    # A stuck teardown must not keep the process alive: llama-server exits
    # within a moment of SIGTERM.
    watchdog = threading.Timer(3.0, lambda: os._exit(1))
    watchdog.daemon = True
    watchdog.start()
    del server  # ~Server(): terminates the task loop, stops HTTP, joins threads
    err("exiting")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
