"""Model documents from file facts, and file kinds by name (PURE).

``reconcile models add`` hashes files in place (``modelstore.py`` and the
command do the IO) and hands the facts here, which decides what each file is,
which format the model has, what it is called, and builds the ``kind: Model``
document (BEHAVIOUR §1.1) as a dict and as YAML text.

File kinds are decided by name alone:

* weights: ``*.gguf *.safetensors *.bin *.npz`` (the shards);
* tokenizer: the first present of ``tokenizer.json``, ``tokenizer.model``,
  ``tiktoken.model``, ``spiece.model``;
* template: the first present of ``chat_template.jinja``,
  ``chat_template.json``;
* anything else (``config.json``, READMEs) is not part of the document.

A directory of GGUF files is often several models side by side: quantisations
(``x-q4_k_m.gguf``, ``x-q8_0.gguf``) and a vision projector (``mmproj-*.gguf``,
which is no model). ``one_gguf_model`` accepts exactly one model there, a
single file or one complete split set ``x-0000K-of-0000N.gguf``, and otherwise
names the candidates so the user can pass the file they mean.

Ollama's manifests (JSON in Ollama's own store) are read here too: the tag
grammar and the model layer's digest.

Size: the file-name rules of four model formats (GGUF split sets, projectors,
tokenizers, the Hugging Face cache) and the two document writers: the pure half
of ``models add``.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Iterable

import attrs
import yaml

from reconciler.core.desired import ModelFormat
from reconciler.core.units import is_plain_token

API_VERSION = "reconciler/v1"
MAX_SHARDS = 255

WEIGHT_SUFFIXES = (".gguf", ".safetensors", ".bin", ".npz")
TOKENIZER_NAMES = ("tokenizer.json", "tokenizer.model", "tiktoken.model", "spiece.model")
TEMPLATE_NAMES = ("chat_template.jinja", "chat_template.json")

OLLAMA_MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
OLLAMA_DEFAULT_HOST = "registry.ollama.ai"
OLLAMA_DEFAULT_NAMESPACE = "library"

_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+:-]{0,127}$")
_SPLIT_GGUF = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_OLLAMA_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class FileKind(enum.StrEnum):
    WEIGHT = "weight"
    TOKENIZER = "tokenizer"
    TEMPLATE = "template"
    OTHER = "other"


@attrs.frozen(kw_only=True)
class FileFact:
    """A hashed file, its path relative to the model root."""

    path: str
    size: int
    sha256: str


def file_kind(path: str) -> FileKind:
    """What a file is, by its name (weights anywhere; tokenizer/template at the top)."""
    name = path.rsplit("/", 1)[-1]
    if name.lower().endswith(WEIGHT_SUFFIXES):
        return FileKind.WEIGHT
    if "/" not in path and name in TOKENIZER_NAMES:
        return FileKind.TOKENIZER
    if "/" not in path and name in TEMPLATE_NAMES:
        return FileKind.TEMPLATE
    return FileKind.OTHER


def first_of(candidates: tuple[str, ...], present: Iterable[str]) -> str | None:
    """The first candidate name that is present (tokenizer/template preference)."""
    have = set(present)
    return next((c for c in candidates if c in have), None)


def is_safe_relpath(path: object) -> bool:
    """BEHAVIOUR §1.1 shard paths: relative; no empty, ``.`` or ``..``; plain components ≤128."""
    if not isinstance(path, str) or not path:
        return False
    return all(_COMPONENT.fullmatch(c) and ".." not in c for c in path.split("/"))


def split_gguf_parts(name: str) -> tuple[str, ...] | None:
    """All part names of a split GGUF (``x-00001-of-00003.gguf``), or None if not split."""
    m = _SPLIT_GGUF.match(name)
    if m is None:
        return None
    total = int(m["total"])
    if total < 1 or int(m["part"]) > total:
        return None
    return tuple(f"{m['stem']}-{i:05d}-of-{total:05d}.gguf" for i in range(1, total + 1))


def is_projector(path: str) -> bool:
    """A multimodal projector (``mmproj-*.gguf``): a GGUF that is not a model by itself."""
    return "mmproj" in path.rsplit("/", 1)[-1].lower()


def one_gguf_model(ggufs: Iterable[str], *, where: str) -> tuple[str, ...]:
    """The files of the one GGUF model among a directory's ``*.gguf`` (paths relative to it).

    One single file, or every part of one split set. Anything else (several
    models, a projector beside the model, only a projector, an incomplete
    split set) is a ValueError that names the candidates and the command to
    describe one of them; ``where`` is the directory as the user wrote it.
    """
    files = sorted(set(ggufs))
    if not files:
        raise ValueError(f"no GGUF files in {where}")
    groups: dict[tuple[str, ...], list[str]] = {}  # a model's full file list → those present
    projectors = []
    for p in files:
        if is_projector(p):
            projectors.append(p)
            continue
        folder, _, base = p.rpartition("/")
        parts = split_gguf_parts(base) or (base,)
        groups.setdefault(tuple(f"{folder}/{x}" if folder else x for x in parts), []).append(p)
    if len(groups) == 1 and not projectors:
        ((model, present),) = groups.items()
        missing = [x for x in model if x not in present]
        if missing:
            raise ValueError(f"split GGUF {model[0]} in {where} is incomplete: "
                             f"{len(missing)} of {len(model)} parts missing "
                             f"({', '.join(missing)})")
        return model
    lines = []
    for model, present in sorted(groups.items()):
        note = "" if len(model) == 1 else f"  (split: {len(present)} of {len(model)} parts)"
        lines.append(f"  {present[0]}{note}")
    lines += [f"  {p}  (multimodal projector, not a model)" for p in projectors]
    complete = sorted(present[0] for model, present in groups.items() if len(present) == len(model))
    pick = complete[0] if complete else None if groups else projectors[0]
    if groups:
        extra = f" and {_count(len(projectors), 'projector')}" if projectors else ""
        head = (f"{where} holds {_count(len(groups), 'GGUF model')}{extra}, "
                "and a Model document describes one model:")
        tail = "pass the model's file"
    else:
        head = f"{where} holds no GGUF model, only a multimodal projector:"
        tail = "pass the file if it really is the model"
    if pick is not None:
        tail += f", e.g. `reconcile models add {where.rstrip('/')}/{pick}`"
    raise ValueError("\n".join([head, *lines, tail]))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def weights_for(fmt: ModelFormat, paths: Iterable[str]) -> tuple[str, ...]:
    """The weight files a format uses among ``paths``.

    gguf: ``*.gguf``; mlx: ``*.safetensors *.npz``; safetensors: ``*.safetensors``.
    ``*.bin`` only when the preferred kinds are absent (a repository that ships
    both ``model.safetensors`` and ``pytorch_model.bin`` is served from the first).
    """
    weights = [p for p in paths if file_kind(p) is FileKind.WEIGHT]
    preferred = {
        ModelFormat.GGUF: (".gguf",),
        ModelFormat.MLX: (".safetensors", ".npz"),
        ModelFormat.SAFETENSORS: (".safetensors",),
    }.get(fmt, ())
    chosen = [p for p in weights if p.lower().endswith(preferred)]
    if not chosen and fmt is not ModelFormat.GGUF:
        chosen = [p for p in weights if p.lower().endswith(".bin")]
    return tuple(sorted(chosen))


def detect_format(paths: Iterable[str], *, mlx_quantized: bool = False) -> ModelFormat | None:
    """The format of a directory's weights, or None when the names do not decide it.

    Only GGUF → gguf; ``*.npz`` (or safetensors with an MLX quantization block in
    ``config.json``, which the caller reads) → mlx; safetensors → safetensors.
    Mixed GGUF and other weights, or only ``*.bin``, need ``--format``.
    """
    suffixes = {p.rsplit(".", 1)[-1].lower() for p in paths if file_kind(p) is FileKind.WEIGHT}
    if suffixes == {"gguf"}:
        return ModelFormat.GGUF
    if not suffixes or "gguf" in suffixes:
        return None
    if "npz" in suffixes or ("safetensors" in suffixes and mlx_quantized):
        return ModelFormat.MLX
    if "safetensors" in suffixes:
        return ModelFormat.SAFETENSORS
    return None


def plain_name(text: str) -> str:
    """A plain token made from a file or directory name (BEHAVIOUR §1)."""
    for suffix in (".gguf", ".safetensors"):
        if text.lower().endswith(suffix):
            text = text[: -len(suffix)]
    m = re.match(r"^(.+)-\d{5}-of-\d{5}$", text)
    if m:
        text = m.group(1)
    text = re.sub(r"[^A-Za-z0-9._+:-]+", "-", text)
    text = re.sub(r"\.{2,}", ".", text)
    text = re.sub(r"^[^A-Za-z0-9]+", "", text)[:64].rstrip(".-_+:")
    return text if is_plain_token(text) else "model"


def hf_cache_source(root: str) -> tuple[str, str | None] | None:
    """``(hf_repo, hf_revision)`` when ``root`` is ``…/models--org--name/snapshots/<rev>``."""
    parts = root.rstrip("/").split("/")
    if len(parts) < 3 or parts[-2] != "snapshots" or not parts[-3].startswith("models--"):
        return None
    repo = parts[-3][len("models--"):].replace("--", "/")
    revision = parts[-1] if re.fullmatch(r"[0-9a-f]{40}", parts[-1]) else None
    return repo, revision


def model_document(
    *,
    name: str,
    fmt: ModelFormat,
    root: str,
    shards: Iterable[FileFact],
    tokenizer: FileFact | None = None,
    template: FileFact | None = None,
    hf: tuple[str, str | None] | None = None,
) -> dict:
    """A ``kind: Model`` document for files under ``root``; ValueError when it cannot be valid."""
    shard_list = sorted(shards, key=lambda f: f.path)
    if not is_plain_token(name):
        raise ValueError(f"{name!r} is not a plain token (1-64 of A-Z a-z 0-9 . _ + : -)")
    if fmt is ModelFormat.OLLAMA:
        raise ValueError("an ollama model is described by its tag (use --ollama NAME:TAG)")
    if not root.startswith("/"):
        raise ValueError(f"root {root!r} is not absolute")
    if not shard_list:
        raise ValueError(f"no {fmt} weight files under {root}")
    if len(shard_list) > MAX_SHARDS:
        raise ValueError(f"{len(shard_list)} weight files; a model has at most {MAX_SHARDS}")
    for f in [*shard_list, *(x for x in (tokenizer, template) if x is not None)]:
        if not is_safe_relpath(f.path):
            raise ValueError(f"{f.path!r} cannot be named in a manifest (not a safe relative path)")
        if not _HEX64.fullmatch(f.sha256):
            raise ValueError(f"{f.path}: {f.sha256!r} is not a sha256 digest")
    spec: dict = {
        "format": str(fmt),
        "root": root,
        "shards": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in shard_list],
    }
    if tokenizer is not None:
        spec["tokenizer"] = {"path": tokenizer.path, "sha256": tokenizer.sha256}
    if template is not None:
        spec["template"] = {"path": template.path, "sha256": template.sha256}
    if hf is not None:
        source = {"hf_repo": hf[0]}
        if hf[1] is not None:
            source["hf_revision"] = hf[1]
        spec["source"] = source
    return _document(name, spec)


def ollama_document(*, name: str, tag: str) -> dict:
    """A ``kind: Model`` document for a model Ollama already holds (no root, no shards)."""
    if not is_plain_token(name):
        raise ValueError(f"{name!r} is not a plain token (1-64 of A-Z a-z 0-9 . _ + : -)")
    return _document(name, {"format": "ollama", "source": {"ollama_tag": tag}})


def _document(name: str, spec: dict) -> dict:
    return {"apiVersion": API_VERSION, "kind": "Model", "metadata": {"name": name}, "spec": spec}


def render_document(doc: dict, schema_ref: str | None) -> str:
    """YAML text of a document, with the editor's schema line first when known."""
    head = f"# yaml-language-server: $schema={schema_ref}\n" if schema_ref else ""
    return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


# ---------------------------------------------------------------- ollama


@attrs.frozen(kw_only=True)
class OllamaName:
    """A parsed ``[host/][namespace/]model[:tag]`` name."""

    host: str
    namespace: str
    model: str
    tag: str

    @property
    def manifest_parts(self) -> tuple[str, ...]:
        """Path components of the manifest under ``<models>/manifests``."""
        return ("manifests", self.host, self.namespace, self.model, self.tag)

    @property
    def short(self) -> str:
        """The tag as Ollama lists it: ``llama3.2:latest``, ``user/model:tag``."""
        prefix = ""
        if self.host != OLLAMA_DEFAULT_HOST:
            prefix = f"{self.host}/{self.namespace}/"
        elif self.namespace != OLLAMA_DEFAULT_NAMESPACE:
            prefix = f"{self.namespace}/"
        return f"{prefix}{self.model}:{self.tag}"


def parse_ollama_name(text: str) -> OllamaName:
    """Ollama's name grammar; ValueError for anything that could escape its store."""
    if text.count(":") > 1:
        raise ValueError(f"{text!r} is not an Ollama name (one ':' at most)")
    name, _, tag = text.partition(":")
    parts = name.split("/")
    if len(parts) > 3 or not all(_OLLAMA_PART.fullmatch(p) and ".." not in p for p in parts):
        raise ValueError(f"{text!r} is not an Ollama name like 'llama3.2:3b'")
    tag = tag or "latest"
    if not _OLLAMA_PART.fullmatch(tag) or ".." in tag:
        raise ValueError(f"{tag!r} is not an Ollama tag")
    host = parts[-3] if len(parts) == 3 else OLLAMA_DEFAULT_HOST
    namespace = parts[-2] if len(parts) >= 2 else OLLAMA_DEFAULT_NAMESPACE
    return OllamaName(host=host, namespace=namespace, model=parts[-1], tag=tag)


def ollama_model_blob(manifest_text: str) -> tuple[str, int]:
    """``(blob file name, size)`` of the model layer of an Ollama manifest; ValueError if none."""
    try:
        manifest = json.loads(manifest_text)
    except ValueError as e:
        raise ValueError(f"not a JSON manifest: {e}") from None
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    for layer in layers if isinstance(layers, list) else ():
        if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_MEDIA_TYPE:
            digest = layer.get("digest")
            size = layer.get("size")
            algo, _, hexpart = digest.partition(":") if isinstance(digest, str) else ("", "", "")
            if algo != "sha256" or not _HEX64.fullmatch(hexpart) or not isinstance(size, int):
                raise ValueError(f"the model layer's digest {digest!r} is malformed")
            return f"sha256-{hexpart}", size
    raise ValueError(f"the manifest has no {OLLAMA_MODEL_MEDIA_TYPE} layer")
