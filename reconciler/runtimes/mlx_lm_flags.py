"""Every flag of ``mlx_lm.server --help``, classified (PURE data; BEHAVIOUR §1.4).

mlx-lm 0.32.2's server (argparse: ``--flag=value`` is split, prefixes are
abbreviations the reconciler does not accept). Checked against the real
``mlx_lm.server --help`` in ``tests/manifests/test_flag_tables.py``.

``--trust-remote-code`` is refused: it runs Python code shipped beside the
weights (or named from another Hub repository by ``auto_map``), and no Model
document verifies that code, so a verified model could still run unverified code.
"""

from __future__ import annotations

from reconciler.runtimes.flags import FlagClass, FlagTable, ValueType, flag

N, I, F, E, L, T, J, P = (ValueType.NONE, ValueType.INT, ValueType.FLOAT, ValueType.ENUM,
                          ValueType.LIST, ValueType.TEXT, ValueType.JSON, ValueType.FILE)
OWNED, WEIGHTS, EXPECTS, DEVICE = (FlagClass.OWNED, FlagClass.WEIGHTS, FlagClass.EXPECTS,
                                   FlagClass.DEVICE)

TRUST_REMOTE_CODE = ("runs Python code shipped beside the weights (or fetched from another "
                     "Hub repository), which no Model document verifies")

TABLE = FlagTable((
    flag("-h --help", cls=EXPECTS, instead="prints its usage and exits: a role's server must "
         "keep serving"),
    flag("--model", P, OWNED, "spec.model: MODEL"),
    flag("--adapter-path", P, WEIGHTS, "spec.serve.adapter: MODEL"),
    flag("--host", T, OWNED, "spec.serve.host"),
    flag("--port", I, OWNED, "spec.serve.port"),
    flag("--allowed-origins", L),
    flag("--draft-model", P, WEIGHTS, "spec.serve.draft_model: MODEL"),
    flag("--num-draft-tokens", I),
    flag("--trust-remote-code", cls=EXPECTS, instead=TRUST_REMOTE_CODE),
    flag("--log-level", E, choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")),
    flag("--chat-template", T),
    flag("--use-default-chat-template"),
    flag("--temp", F),
    flag("--top-p", F),
    flag("--top-k", I),
    flag("--min-p", F),
    flag("--max-tokens", I),
    flag("--chat-template-args", J),
    flag("--decode-concurrency", I),
    flag("--prompt-concurrency", I),
    flag("--prefill-step-size", I),
    flag("--prompt-cache-size", I),
    flag("--prompt-cache-bytes", T),
    flag("--kv-bits", I),
    flag("--kv-group-size", I),
    flag("--quantized-kv-start", I),
    flag("--pipeline", cls=DEVICE),
))
