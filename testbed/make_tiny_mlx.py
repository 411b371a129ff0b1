#!/usr/bin/env python3
"""Write a tiny random-weight llama model that mlx_lm.server can load offline.

    make_tiny_mlx.py DIR [--seed N]

DIR gets:
  config.json            model_type llama, hidden 64, 2 layers, 4 heads
                         (4 kv heads), intermediate 128, float32
  model.safetensors      tensor names as in mlx_lm/models/llama.py
  tokenizer.json         byte-level BPE (~320 tokens, <s> </s>) trained here
  tokenizer_config.json  PreTrainedTokenizerFast + a simple chat template

Needs numpy, safetensors and tokenizers (no mlx, no network). The output is
the same for the same seed and library versions. The output rows of the special
tokens and of every token that is not printable ASCII are zero, so greedy
decoding returns printable text.
"""

import argparse
import json
import os
import sys

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 4
HEAD_DIM = HIDDEN // HEADS
INTERMEDIATE = 128
CONTEXT = 512
VOCAB_TARGET = 320
SPECIAL = ["<s>", "</s>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)

CORPUS = """\
hi hello hey there. the quick brown fox jumps over the lazy dog.
a tiny model for tests says hello to the reconciler and the server.
user: hi assistant: hello, how can i help you today?
the cat sat on the mat. one two three four five six seven eight nine ten.
what is the time? it is time to test the local inference server.
model server port host health ready load token chat completion.
0 1 2 3 4 5 6 7 8 9 , . ! ? : ; ' " ( ) - _ / + = * # @ & % $
"""


def bytes_to_unicode():
    """GPT-2's byte -> printable unicode map (what ByteLevel uses)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def train_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET,
        min_frequency=1,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS.splitlines() * 4, trainer=trainer)
    return tok


def printable_mask(tok, vocab_size):
    """True for tokens whose bytes are all printable ASCII (incl. space)."""
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    ok = np.zeros(vocab_size, dtype=bool)
    for piece, idx in tok.get_vocab(with_added_tokens=False).items():
        try:
            raw = bytes(byte_of[c] for c in piece)
        except KeyError:
            continue
        ok[idx] = all(0x20 <= b <= 0x7E for b in raw)
    return ok


def make_weights(rng, vocab_size, printable):
    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w = {}
    w["model.embed_tokens.weight"] = normal((vocab_size, HIDDEN), 1.0)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        s = HIDDEN**-0.5
        w[p + "self_attn.q_proj.weight"] = normal((HEADS * HEAD_DIM, HIDDEN), s)
        w[p + "self_attn.k_proj.weight"] = normal((KV_HEADS * HEAD_DIM, HIDDEN), s)
        w[p + "self_attn.v_proj.weight"] = normal((KV_HEADS * HEAD_DIM, HIDDEN), s)
        w[p + "self_attn.o_proj.weight"] = normal((HIDDEN, HEADS * HEAD_DIM), s)
        w[p + "mlp.gate_proj.weight"] = normal((INTERMEDIATE, HIDDEN), s)
        w[p + "mlp.up_proj.weight"] = normal((INTERMEDIATE, HIDDEN), s)
        w[p + "mlp.down_proj.weight"] = normal(
            (HIDDEN, INTERMEDIATE), INTERMEDIATE**-0.5
        )
        w[p + "input_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
        w[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    w["model.norm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    lm_head = normal((vocab_size, HIDDEN), 1.0)
    lm_head[~printable] = 0.0
    w["lm_head.weight"] = lm_head
    return w


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.makedirs(args.dir, exist_ok=True)

    tok = train_tokenizer()
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    printable = printable_mask(tok, vocab_size)
    tok.save(os.path.join(args.dir, "tokenizer.json"))

    write_json(
        os.path.join(args.dir, "tokenizer_config.json"),
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": CONTEXT,
            "chat_template": CHAT_TEMPLATE,
        },
    )
    write_json(
        os.path.join(args.dir, "config.json"),
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": HIDDEN,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS,
            "head_dim": HEAD_DIM,
            "intermediate_size": INTERMEDIATE,
            "vocab_size": vocab_size,
            "max_position_embeddings": CONTEXT,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
            "bos_token_id": bos,
            "eos_token_id": eos,
        },
    )

    rng = np.random.default_rng(args.seed)
    weights = make_weights(rng, vocab_size, printable)
    save_file(
        weights,
        os.path.join(args.dir, "model.safetensors"),
        metadata={"format": "pt"},
    )

    for name in os.listdir(args.dir):
        os.chmod(os.path.join(args.dir, name), 0o644)
    os.chmod(args.dir, 0o755)
    n_params = sum(a.size for a in weights.values())
    print(
        f"make_tiny_mlx: {args.dir}: vocab {vocab_size}, {n_params} params",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
