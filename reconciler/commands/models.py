"""``reconcile models add`` and ``reconcile models verify`` (SHELL).

``add`` hashes a model where it lies (nothing is copied or moved) and prints
a valid ``kind: Model`` document, or writes it with ``-o FILE``:

* a file: a GGUF (with all parts of a split ``x-00001-of-0000N.gguf``);
* a directory: its weights, tokenizer and chat template (``modeldoc`` names
  them); hidden entries and symlinked directories are not descended into;
  a file that resolves outside the directory is refused, as verification
  would refuse it (a Hugging Face snapshot may link into its own ``blobs/``).
  A GGUF directory must hold exactly one model (one file, or one complete
  split set); beside several quantisations or a ``mmproj-*`` projector the
  command lists the candidates and asks for the file;
* ``--ollama NAME:TAG``: read from Ollama's own manifest and blob store under
  ``$OLLAMA_MODELS`` or ``~/.ollama/models`` (no server needed); the model
  blob is hashed against its digest, and the document names the tag only.

``verify`` checks every model of the manifests (or the named ones) and
prints a table; exit 1 if any is not verified. A sticky mismatch is only
lifted by ``--full``.

Size: two commands that share the model-file rules: ``add`` (files, a
directory, an Ollama tag) and ``verify``.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
from typing import Iterator

from reconciler.manifests import modeldoc, schemata
from reconciler.models import modelstore
from reconciler.core.exitcodes import Exit
import attrs

from reconciler.commands import common, modelfetch
from reconciler.commands import options as opt
from reconciler.commands.options import GlobalOptions
from reconciler.core.desired import ModelFile, ModelFormat, ModelSpec
from reconciler.core.observed import ModelCheck, ModelState
from reconciler.manifests.modeldoc import FileFact
from reconciler.core.units import format_size, is_plain_token
from reconciler.repo import sources


@attrs.frozen(kw_only=True)
class ModelsAddOptions:
    path: str | None = None
    name: str | None = None
    format: str | None = None
    ollama: str | None = None
    output: str | None = None
    url: str | None = None
    sha256: str | None = None
    hf_endpoint: str | None = None
    hf_token_file: str | None = None


@attrs.frozen(kw_only=True)
class ModelsVerifyOptions:
    names: tuple[str, ...] = attrs.field(default=(), converter=opt.tuple_of)
    full: bool = False
    json: bool = False


_SMALL_FILE = 1 << 20  # config.json, Ollama manifests


# ---------------------------------------------------------------- add


def run_add(g: GlobalOptions, o: ModelsAddOptions) -> int:
    return common.emit_document(lambda: _added(o), o.output)


def _added(o: ModelsAddOptions) -> str:
    """The Model document ``models add`` prints (or writes to ``--output``)."""
    if modelfetch.wants_remote(o):  # hf://… or --url: from metadata (§1.6)
        doc = modelfetch.remote_document(o)
    elif o.ollama:
        doc = _ollama_document(o)
    else:
        doc = _files_document(o)
    return modeldoc.render_document(doc, _schema_ref(o.output))


def _files_document(o: ModelsAddOptions) -> dict:
    if not o.path:
        raise ValueError("give a PATH (a GGUF file or a model directory) or --ollama NAME:TAG")
    if o.format == "ollama":
        raise ValueError("an ollama model is described by its tag: use --ollama NAME:TAG")
    if o.name is not None and not is_plain_token(o.name):
        raise ValueError(f"--name {o.name!r} is not a plain token "
                         "(1-64 of A-Z a-z 0-9 . _ + : -, starting with a letter or digit)")
    return files_document(o.path, name=o.name, fmt=o.format)


def files_document(path: str, *, name: str | None = None, fmt: str | None = None) -> dict:
    """The Model document of a GGUF file or a model directory, its files hashed in place."""
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        root = os.path.realpath(path)
        rels = _scan(root)
        default_name = os.path.basename(root)
    elif stat.S_ISREG(st.st_mode):
        root = os.path.realpath(os.path.dirname(os.path.abspath(path)))
        base = os.path.basename(path)
        rels = list(modeldoc.split_gguf_parts(base) or (base,))
        default_name = base
    else:
        raise ValueError(f"{path} is neither a regular file nor a directory")
    hf = modeldoc.hf_cache_source(root)
    if hf is not None and "/" not in hf[0]:
        hf = None
    if hf is not None and stat.S_ISDIR(st.st_mode):
        default_name = hf[0].rsplit("/", 1)[-1]
    name = name or modeldoc.plain_name(default_name)
    fmt = ModelFormat(fmt) if fmt else modeldoc.detect_format(
        rels, mlx_quantized=_mlx_quantized(root))
    if fmt is None:
        kinds = sorted({p.rsplit(".", 1)[-1] for p in rels
                        if modeldoc.file_kind(p) is modeldoc.FileKind.WEIGHT})
        raise ValueError(f"cannot tell the format of {path} from its weights "
                         f"({', '.join(kinds) or 'none found'}); use --format")
    weights = modeldoc.weights_for(fmt, rels)
    if fmt is ModelFormat.GGUF and stat.S_ISDIR(st.st_mode) and weights:
        weights = modeldoc.one_gguf_model(weights, where=path)
    tokenizer = template = None
    if fmt is not ModelFormat.GGUF:  # a GGUF carries its own tokenizer and template
        tokenizer = modeldoc.first_of(modeldoc.TOKENIZER_NAMES, rels)
        template = modeldoc.first_of(modeldoc.TEMPLATE_NAMES, rels)
    chosen = [*weights, *(p for p in (tokenizer, template) if p)]
    bad = [p for p in chosen if not modeldoc.is_safe_relpath(p)]
    if bad:
        raise ValueError(f"cannot name {bad[0]!r} in a manifest (path components must be "
                         "letters, digits or . _ + : -); rename it")
    if not weights:
        raise ValueError(f"no {fmt} weight files in {path}")
    if len(weights) > modeldoc.MAX_SHARDS:
        raise ValueError(f"{len(weights)} weight files; a model has at most {modeldoc.MAX_SHARDS}")
    roots = modelstore.allowed_roots(root)
    facts = {p: _hash_in_root(name, root, roots, p) for p in chosen}
    return modeldoc.model_document(
        name=name, fmt=fmt, root=root, shards=[facts[p] for p in weights],
        tokenizer=facts[tokenizer] if tokenizer else None,
        template=facts[template] if template else None, hf=hf,
    )


def _scan(root: str) -> list[str]:
    """Relative paths of the files under a directory (no hidden entries, no symlinked dirs)."""
    out = []
    for here, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        rel = os.path.relpath(here, root)
        for f in files:
            if not f.startswith("."):
                out.append(f if rel == "." else f"{rel}/{f}")
    return sorted(out)


def _hash_in_root(name: str, root: str, roots: tuple[str, ...], rel: str) -> FileFact:
    found = modelstore.locate(name, root, roots, "file", ModelFile(path=rel, sha256=""))
    if isinstance(found, ModelCheck):
        raise ValueError(found.detail)
    real, _ = found
    hashed = modelstore.hash_file(real)
    return FileFact(path=rel, size=hashed.stamp.size, sha256=hashed.stamp.sha256)


def _read_small(path: str) -> str:
    """A small regular file's text (never a FIFO or device)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode) or st.st_size > _SMALL_FILE:
        raise ValueError(f"{path} is not a small regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        return f.read(_SMALL_FILE).decode("utf-8")


def _mlx_quantized(root: str) -> bool:
    """An MLX conversion says so in config.json (a ``quantization`` block)."""
    try:
        config = json.loads(_read_small(os.path.join(root, "config.json")))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and isinstance(config.get("quantization"), dict)


def ollama_models_dir(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get("OLLAMA_MODELS") or os.path.join(os.path.expanduser("~"), ".ollama", "models")


def _ollama_document(o: ModelsAddOptions) -> dict:
    if o.path:
        raise ValueError("give a PATH or --ollama NAME:TAG, not both")
    if o.format not in (None, "ollama"):
        raise ValueError(f"--ollama describes an ollama model, not {o.format}")
    if o.name is not None and not is_plain_token(o.name):
        raise ValueError(f"--name {o.name!r} is not a plain token")
    oname = modeldoc.parse_ollama_name(o.ollama)
    models = ollama_models_dir()
    manifest = os.path.join(models, *oname.manifest_parts)
    try:
        text = _read_small(manifest)
    except FileNotFoundError:
        raise ValueError(f"Ollama has no {oname.short} under {models} "
                         f"(no manifest {manifest}); pull it with Ollama first") from None
    blob, size = modeldoc.ollama_model_blob(text)
    blob_path = os.path.join(models, "blobs", blob)
    try:
        hashed = modelstore.hash_file(os.path.realpath(blob_path))
    except FileNotFoundError:
        raise ValueError(f"{oname.short}: model blob {blob_path} is missing") from None
    if hashed.stamp.size != size:
        raise ValueError(f"{oname.short}: blob size {hashed.stamp.size} != manifest {size}")
    if f"sha256-{hashed.stamp.sha256}" != blob:
        raise ValueError(f"{oname.short}: blob {blob_path} does not hash to its name")
    name = o.name or modeldoc.plain_name(oname.short.replace("/", "-"))
    return modeldoc.ollama_document(name=name, tag=oname.short)


def _schema_ref(output: str | None) -> str | None:
    """The Model schema for editors: relative to the written file, else absolute."""
    here = os.path.dirname(os.path.abspath(schemata.__file__))
    for candidate in (os.path.join(here, "schemas", "model.schema.json"),
                      os.path.join(here, os.pardir, os.pardir, "schemas", "model.schema.json")):
        if os.path.isfile(candidate):
            schema = os.path.realpath(candidate)
            out_dir = os.path.realpath(os.path.dirname(os.path.abspath(output or "")))
            if output and os.path.commonpath([schema, out_dir]) != "/":
                return os.path.relpath(schema, out_dir)
            return schema
    return None


# ---------------------------------------------------------------- verify

_COLUMNS = ("MODEL", "FORMAT", "FILES", "SIZE", "STATE", "DETAIL")


@contextlib.contextmanager
def _open_stamps(g: GlobalOptions) -> Iterator[modelstore.StampStore]:
    """Stamps and sticky mismatches live in the state store of ``--state-dir``."""
    with common.open_store(g) as store:
        yield store


def verify_rows(models: list[ModelSpec], verifier: modelstore.Verifier, *, full: bool) -> list[dict]:
    rows = []
    for spec in models:
        check = verifier.verify(spec, full=full)
        ollama = spec.format is ModelFormat.OLLAMA
        rows.append({
            "model": spec.name,
            "format": str(spec.format),
            "files": len(spec.files),
            "size_bytes": None if ollama else spec.weights_size,
            "state": str(check.state),
            "detail": check.detail,
        })
    return rows


def run_verify(g: GlobalOptions, o: ModelsVerifyOptions) -> int:
    loaded = sources.load_desired(common.manifest_paths(g), node=common.node_choice(g))
    if loaded.problems or loaded.desired is None:
        return common.report_problems(loaded.problems)
    desired = loaded.desired
    unknown = [n for n in o.names if desired.model(n) is None]
    if unknown:
        print(f"reconcile: error: no model {unknown[0]!r} in the manifests", file=sys.stderr)
        return Exit.ERROR
    models = [desired.model(n) for n in dict.fromkeys(o.names)] if o.names \
        else list(desired.models)
    with _open_stamps(g) as stamps:
        rows = verify_rows(models, modelstore.Verifier(stamps), full=o.full)
    if o.json:
        common.print_json({"models": rows})
    else:
        _print_table(rows)
        if not o.full and any(r["state"] == ModelState.MISMATCH for r in rows):
            print("a mismatch stays until `reconcile models verify --full NAME` passes",
                  file=sys.stderr)
    return Exit.OK if all(r["state"] == ModelState.VERIFIED for r in rows) else Exit.ERROR


def _print_table(rows: list[dict]) -> None:
    cells = [_COLUMNS] + [
        (r["model"], r["format"], str(r["files"]),
         "-" if r["size_bytes"] is None else format_size(r["size_bytes"]),
         r["state"], r["detail"])
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_COLUMNS) - 1)]
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths)) + "  " + c[-1])
