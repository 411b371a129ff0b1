"""InferenceSpec documents as YAML text, for tests that write manifests and run the real command.

One writer for every e2e helper that used to spell a role document by hand: ``inference_spec``
gives the document, each caller keeps only what is its own (a state, a liveness block, devices).
A value is written as given (a YAML flow value: ``"{count: 1}"``, ``'["--threads", "1"]'``).
"""

from __future__ import annotations

#: What a managed llama.cpp role of the e2e testbed passes by default (one thread: 2 cores).
THREADS = '["--threads", "1"]'


def inference_spec(name: str, port: int, *, runtime: str = "llamacpp", mode: str = "managed",
                   model: str = "tiny", state: str | None = None, ctx: int | None = 512,
                   extra_args: str | None = THREADS, serve: str = "", raw: str = "",
                   **fields: str) -> str:
    """An InferenceSpec named ``name`` serving on ``port``.

    ``serve``: more entries of the ``serve`` mapping (``"kv_quant: q8_0"``); ``fields``: more
    ``spec`` keys, each a YAML value (``memory="{weights: 1GB}"``); ``raw``: spec lines as
    written (``"memory: {kv: 96MiB}"``). ``ctx`` or ``extra_args`` None: left out.
    """
    entries = [f"port: {port}"]
    entries += [f"ctx: {ctx}"] if ctx is not None else []
    entries += [f"extra_args: {extra_args}"] if extra_args is not None else []
    entries += [serve] if serve else []
    lines = ["apiVersion: reconciler/v1", "kind: InferenceSpec", f"metadata: {{name: {name}}}",
             "spec:", f"  runtime: {runtime}", f"  mode: {mode}", f"  model: {model}"]
    lines += [f"  state: {state}"] if state is not None else []
    lines.append(f"  serve: {{{', '.join(entries)}}}")
    lines += [f"  {key}: {value}" for key, value in fields.items()]
    lines += [f"  {line}" for line in raw.splitlines() if line.strip()]
    return "\n".join(lines) + "\n"
