#!/usr/bin/env python3
"""Write a tiny random-weight llama GGUF model (test/demo support only).

    make_tiny_gguf.py PATH [--seed N]

2 blocks, n_embd 64, 4 heads (4 kv heads), n_ff 128, context 512, and a
~360-token SentencePiece-style vocabulary (tokenizer_model "llama"):
<unk> <s> </s>, the 256 <0xNN> byte tokens, letters, digits, a few
punctuation marks and some "\u2581word" pieces.  All tensors are float32; the
file is ~0.5 MB and byte-identical for a given seed.

The output-projection rows of the control and byte tokens are zero, so their
logits are 0 while some ordinary token's logit is positive: greedy decoding
always yields a printable piece (never </s>, never a lone UTF-8 fragment).

Numpy arrays are (rows, cols) = ggml (ne1, ne0).  Needs `gguf` and `numpy`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
import gguf

N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 4
N_FF = 128
N_LAYER = 2
N_CTX = 512
SPACE = "\u2581"  # SentencePiece word-boundary marker

WORDS = [
    "the", "a", "an", "and", "of", "to", "in", "is", "it", "on", "for", "you",
    "hi", "hello", "world", "yes", "no", "ok", "model", "server", "token",
    "test", "tiny", "llama", "cat", "dog", "sun", "day", "good", "time",
]
PUNCT = list(".,!?:;'\"-()")


def build_vocab() -> tuple[list[str], list[float], list[int]]:
    T = gguf.TokenType
    tokens: list[str] = ["<unk>", "<s>", "</s>"]
    scores: list[float] = [0.0, 0.0, 0.0]
    types: list[int] = [T.UNKNOWN, T.CONTROL, T.CONTROL]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(T.BYTE)
    # Single characters: SentencePiece scores are log-probabilities; longer,
    # more frequent pieces get higher scores so the tokenizer prefers them.
    singles = [SPACE] + [chr(c) for c in range(ord("a"), ord("z") + 1)] \
        + [chr(c) for c in range(ord("A"), ord("Z") + 1)] \
        + [str(d) for d in range(10)] + PUNCT
    for i, s in enumerate(singles):
        tokens.append(s)
        scores.append(-10.0 - i * 0.01)
        types.append(T.NORMAL)
    for i, w in enumerate(WORDS):
        tokens.append(SPACE + w)
        scores.append(-1.0 - i * 0.01)
        types.append(T.NORMAL)
    assert len(set(tokens)) == len(tokens)
    return tokens, scores, types


def write(path: str, seed: int) -> None:
    tokens, scores, types = build_vocab()
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)

    def rand(rows: int, cols: int, std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * std).astype(np.float32)

    ones = np.ones(N_EMBD, dtype=np.float32)
    n_embd_kv = N_EMBD // N_HEAD * N_HEAD_KV

    tensors: list[tuple[str, np.ndarray]] = []
    tensors.append(("token_embd.weight", rand(n_vocab, N_EMBD, 1.0)))
    for i in range(N_LAYER):
        p = f"blk.{i}."
        tensors += [
            (p + "attn_norm.weight", ones.copy()),
            (p + "attn_q.weight", rand(N_EMBD, N_EMBD)),
            (p + "attn_k.weight", rand(n_embd_kv, N_EMBD)),
            (p + "attn_v.weight", rand(n_embd_kv, N_EMBD)),
            (p + "attn_output.weight", rand(N_EMBD, N_EMBD)),
            (p + "ffn_norm.weight", ones.copy()),
            (p + "ffn_gate.weight", rand(N_FF, N_EMBD)),
            (p + "ffn_up.weight", rand(N_FF, N_EMBD)),
            (p + "ffn_down.weight", rand(N_EMBD, N_FF)),
        ]
    tensors.append(("output_norm.weight", ones.copy()))
    output = rand(n_vocab, N_EMBD, 1.0)
    T = gguf.TokenType
    for tid, ttype in enumerate(types):
        if ttype in (T.CONTROL, T.BYTE, T.UNKNOWN):
            output[tid, :] = 0.0
    tensors.append(("output.weight", output))

    # Write to a temporary file in the target directory, then rename: a
    # reader never sees a half-written model.
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tiny-", suffix=".gguf", dir=directory)
    os.close(fd)
    try:
        w = gguf.GGUFWriter(tmp, "llama")
        w.add_name("tiny-random-llama")
        w.add_file_type(gguf.LlamaFileType.ALL_F32)
        w.add_context_length(N_CTX)
        w.add_embedding_length(N_EMBD)
        w.add_block_count(N_LAYER)
        w.add_feed_forward_length(N_FF)
        w.add_head_count(N_HEAD)
        w.add_head_count_kv(N_HEAD_KV)
        w.add_rope_dimension_count(N_EMBD // N_HEAD)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_vocab_size(n_vocab)
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        for name, arr in tensors:
            w.add_tensor(name, arr)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", help="output .gguf file")
    ap.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    args = ap.parse_args(argv)
    write(args.path, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
