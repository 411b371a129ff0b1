"""``reconcile models add hf://…`` / ``--url`` and ``reconcile models fetch`` (SHELL).

The one module that imports ``tqdm`` (the foreground fetch's progress bar).

BEHAVIOUR §1.6.

* ``models add hf://ORG/REPO/FILE[@REVISION]`` asks the Hub for the file's
  metadata (``HEAD …/resolve/…``: nothing is downloaded) and writes a Model
  whose ``source`` is the repository at the **commit** the revision names now,
  with the file's sha256 and size; a split GGUF brings every part. ``--url URL``
  does the same for a plain https URL (its sha256 from ``--sha256`` unless the
  server states it). The document has no ``root``: a node that fetches serves
  it from its cache; elsewhere ``model_roots`` names a copy.
* ``models fetch [NAME…]``: the same fetch a pass starts, in the foreground,
  with a progress bar, for this node's Models with a source (or the named ones).
  ``--retry`` first forgets a failed fetch (a digest mismatch stays refused
  until a new generation or this).

Why tqdm and not rich: docs/behaviour.md §1.6 has the measurements.
"""

from __future__ import annotations

import os
import sys

import attrs

from reconciler.commands import common
from reconciler.commands import options as opt
from reconciler.commands.options import GlobalOptions
from reconciler.core.exitcodes import Exit
from reconciler.core.units import format_size
from reconciler.manifests import modeldoc
from reconciler.models import hub

DEFAULT_ENDPOINT = "https://huggingface.co"


@attrs.frozen(kw_only=True)
class ModelsFetchOptions:
    names: tuple[str, ...] = attrs.field(default=(), converter=opt.tuple_of)
    retry: bool = False


def wants_remote(args) -> bool:
    """``args``: ``models.ModelsAddOptions``."""
    return bool(args.url) or (args.path or "").startswith("hf://")


def remote_document(args) -> dict:
    """The Model document for ``args.path`` (hf://…) or ``--url``, from metadata alone."""
    from reconciler.models import fetch

    endpoint = (args.hf_endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    token = _token(args.hf_token_file)
    if args.url:
        name = args.name or modeldoc.plain_name(args.url.rstrip("/").rsplit("/", 1)[-1])
        base = args.url.rstrip("/").rsplit("/", 1)[-1]
        headers = fetch.metadata(args.url)
        if isinstance(headers, str):
            raise ValueError(f"{args.url}: {headers}")
        meta = hub.url_meta(headers, args.sha256, args.url)
        shard = {"path": base, "size": meta.size, "sha256": meta.sha256, "url": args.url}
        return _document(name, [shard], None)
    ref = hub.parse_name(args.path)
    folder, _, base = ref.path.rpartition("/")
    parts = modeldoc.split_gguf_parts(base) or (base,)
    commit = ref.revision if len(ref.revision) == 40 else None
    shards = []
    for part in parts:
        path = f"{folder}/{part}" if folder else part
        url = hub.resolve_url(endpoint, ref.repo, commit or ref.revision, path)
        headers = fetch.metadata(url, token=token, token_origin=endpoint)
        if isinstance(headers, str):
            raise ValueError(f"hf://{ref.repo}/{path}@{commit or ref.revision}: {headers}")
        meta = hub.file_meta(headers, f"hf://{ref.repo}/{path}")
        if commit is None:
            if meta.commit is None:
                raise ValueError(f"hf://{ref.repo}: the Hub did not say which commit "
                                 f"{ref.revision!r} is (no X-Repo-Commit): give @COMMIT")
            commit = meta.commit
        shards.append({"path": path, "size": meta.size, "sha256": meta.sha256})
    name = args.name or modeldoc.plain_name(parts[0].removesuffix(".gguf"))
    return _document(name, shards, {"hf": ref.repo, "revision": commit})


def _document(name: str, shards: list[dict], source: dict | None) -> dict:
    if not all(s["path"].lower().endswith(".gguf") for s in shards):
        raise ValueError("only GGUF files can be described from their metadata for now; "
                         "for a directory model, download it and run `reconcile models add DIR`")
    spec: dict = {"format": "gguf"}
    if source:
        spec["source"] = source
    spec["shards"] = sorted(shards, key=lambda s: s["path"])
    return {"apiVersion": modeldoc.API_VERSION, "kind": "Model", "metadata": {"name": name},
            "spec": spec}


def _token(path: str | None) -> str | None:
    if not path:
        return None
    with open(path, encoding="utf-8") as f:  # OSError: the command names the file
        return f.read().strip()


def run_fetch(g: GlobalOptions, args: ModelsFetchOptions) -> int:
    from reconciler.models import fetchmodel
    from reconciler.repo import sources
    from reconciler.world import fetches

    loaded = sources.load_desired(common.manifest_paths(g), node=common.node_choice(g))
    if loaded.problems or loaded.desired is None:
        return common.report_problems(loaded.problems)
    desired = loaded.desired
    if desired.node.fetch is None:
        print("reconcile: error: this node does not fetch (no spec.fetch in its NodeConfig)",
              file=sys.stderr)
        return Exit.ERROR
    mine = {m.name: m for m in fetches.fetched_models(desired)}
    names = list(dict.fromkeys(args.names)) or sorted(mine)
    unknown = [n for n in names if n not in mine]
    if unknown:
        print(f"reconcile: error: {unknown[0]!r} is not a Model with a source that a role of "
              "this node serves from its cache", file=sys.stderr)
        return Exit.ERROR
    failed = 0
    for name in names:
        job = fetches.model_job(mine[name], desired)
        result = fetchmodel.result_path(fetches.job_path(job.cache, name))
        if args.retry:
            try:
                os.unlink(result)
            except FileNotFoundError:
                pass
        outcome = _with_bar(job, fetchmodel)
        print(f"{name}: {outcome.detail}" if outcome.ok else f"{name}: failed: {outcome.detail}")
        failed += not outcome.ok
    return Exit.ERROR if failed else Exit.OK


def _with_bar(job, fetchmodel):
    from reconciler.models.fetchpolicy import blob_path, partial_path
    from tqdm import tqdm

    total = sum(size for _, _, _, size in job.files)
    have = 0
    for _, _, sha, size in job.files:
        for path in (blob_path(job.cache, sha), partial_path(job.cache, sha)):
            try:
                have += min(os.stat(path).st_size, size)
                break
            except OSError:
                continue
    with tqdm(total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1000,
              desc=f"fetch {job.model} ({format_size(total)})", file=sys.stderr,
              disable=None, mininterval=0.2) as bar:
        return fetchmodel.run(job, progress=bar.update)
