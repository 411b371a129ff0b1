"""One schema-valid document → typed values, with the checks a schema cannot make (PURE).

The schema has already fixed every key and type; what is left here is
parsing (sizes to bytes, durations to seconds, ``localhost`` to 127.0.0.1)
and the per-document rules that need code: shards sorted by path, a port
range that is a range, a loopback address that really is one.

Roles come out as ``RoleDraft``: NodeConfig defaults (restart policy,
keep_alive) and the model's weight size are merged in later, per node
(``fleet.role_on``), once every document is known. Label keys and values and
the operators of a placement's selector are checked here (``labels.py``).

Size: one reader per document kind and its nested fields, each field's check
beside its parse.
"""

from __future__ import annotations

import functools

from typing import Any, Callable

import attrs

from reconciler.core import labels, loopback, units
from reconciler.manifests import devicedocs
from reconciler.manifests import roleextras
from reconciler.runtimes import spec_of
from reconciler.core.errors import Problem
from reconciler.manifests.fleet import FleetRole, Placement
from reconciler.core.desired import (
    DEFAULT_IDLE_AFTER,
    FetchConfig,
    LivenessSpec,
    MemorySpec,
    Mode,
    ModelFile,
    ModelFormat,
    ModelSourceInfo,
    ModelSpec,
    NodeConfig,
    PortRange,
    ProgramSource,
    ProgramSpec,
    RestartPolicy,
    RoleSpec,
    RouterConfig,
    StatusPageConfig,
    RunAs,
    Runtime,
    ServeSpec,
    SourceRef,
    WantedState,
)
from reconciler.manifests.yamlsafe import Document, Path


@attrs.frozen(kw_only=True, eq=False)
class RoleDraft:
    """A role before NodeConfig defaults and model sizes are merged in."""

    spec: RoleSpec
    restart: tuple[tuple[str, float], ...]  # only the fields the role overrides
    keep_alive: float | None  # None: take the NodeConfig default
    weights: int | None  # None: the model's shard sizes
    placement: Placement | None  # None: every node
    doc: Document

    def role(self) -> FleetRole:
        return FleetRole(spec=self.spec, restart=self.restart, keep_alive=self.keep_alive,
                         weights=self.weights, placement=self.placement)


class _Reader:
    """Reads typed fields of one document and collects conversion problems."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.problems: list[Problem] = []

    def get(self, *path: str | int) -> Any:
        value: Any = self.doc.value
        for step in path:
            if isinstance(value, dict):
                value = value.get(step)  # missing: None, as a None value is
            elif isinstance(value, list) and isinstance(step, int) and 0 <= step < len(value):
                value = value[step]
            else:
                return None
        return value

    def parsed(self, path: Path, parse: Callable[[Any], Any], value: Any = None) -> Any:
        """``parse`` the value at ``path`` (or ``value``, already read from there); a
        ``ValueError`` becomes a problem."""
        if value is None:
            value = self.get(*path)
            if value is None:
                return None
        try:
            return parse(value)
        except ValueError as err:
            self.problems.append(self.doc.problem(path, str(err)))
            return None

    def size(self, *path: str | int, value: Any = None) -> int | None:
        return self.parsed(path, _size, value)

    def duration(self, *path: str, negative: bool = False) -> float | None:
        return self.parsed(path, lambda v: units.parse_duration(v, allow_negative=negative))

    def add(self, path: Path, message: str) -> None:
        self.problems.append(self.doc.problem(path, message))

    @property
    def ref(self) -> SourceRef:
        return SourceRef(file=self.doc.file, line=self.doc.line)


def _size(value: Any) -> int:
    """``units.parse_size``; a text read once for every document that repeats it."""
    return _size_of_text(value) if type(value) is str else units.parse_size(value)


@functools.lru_cache(maxsize=1024)
def _size_of_text(text: str) -> int:
    return units.parse_size(text)


def _file(raw: dict[str, Any] | None) -> ModelFile | None:
    if raw is None:
        return None
    size = raw.get("size")
    return ModelFile(path=raw["path"], sha256=raw["sha256"],
                     size=int(size) if size is not None else None,
                     url=raw.get("url"), repo_path=raw.get("repo_path"))


def _sources(r: _Reader, files: list[tuple[tuple[str | int, ...], ModelFile]],
             source: dict[str, Any]) -> None:
    """BEHAVIOUR §1.6: a fetchable file has a size; a repository needs its commit."""
    if ("hf" in source) != ("revision" in source):
        have, lacks = ("hf", "revision") if "hf" in source else ("revision", "hf")
        r.add(("spec", "source"), f"{have!r} needs {lacks!r}: a Hub source is a repository "
                                  "at a commit")
    for path, f in files:
        if f.url is not None and f.repo_path is not None:
            r.add((*path, "url"), "give 'url' or 'repo_path', not both")
        _mirror(r, (*path, "url"), f.url)
        if f.repo_path is not None and "hf" not in source:
            r.add((*path, "repo_path"), "a path in the repository needs spec.source.hf")
        fetchable = f.url is not None or "hf" in source
        if fetchable and f.size is None:
            r.add(path, "missing required key 'size' (a file with a source is fetched: its "
                        "size bounds the download and the disk check)")


def _mirror(r: _Reader, path: Path, url: str | None) -> None:
    """§1.6/§5: plain http only to a loopback mirror, as the fetch will decide it.

    The schema checked the shape (``http://HOST[:PORT][/…]``, no user); whether
    HOST is loopback is the owner's question (``core/loopback``), so ``validate``
    never passes a URL every fetch then refuses (``http://127.0.0.999``).
    """
    if url is None or not url.startswith("http://"):
        return
    authority = url.removeprefix("http://").partition("/")[0]
    if not loopback.is_loopback(authority):
        r.add(path, f"plain http:// goes only to a loopback mirror (127.0.0.0/8, [::1], "
                    f"localhost); {authority!r} is not loopback: use https://")


def model_spec(doc: Document) -> tuple[ModelSpec | None, list[Problem]]:
    r = _Reader(doc)
    shards = tuple(_file(s) for s in r.get("spec", "shards") or ())
    seen: set[str] = set()
    for i, shard in enumerate(shards):
        assert shard is not None
        if shard.path in seen:
            r.add(("spec", "shards", i, "path"), f"duplicate shard path {shard.path!r}")
        elif i and shard.path < shards[i - 1].path:  # type: ignore[union-attr]
            r.add(("spec", "shards", i, "path"),
                  f"shards must be sorted by path: {shard.path!r} comes before "
                  f"{shards[i - 1].path!r}")  # type: ignore[union-attr]
        seen.add(shard.path)
    source = r.get("spec", "source") or {}
    files = [(("spec", "shards", i), s) for i, s in enumerate(shards)]
    files += [(("spec", k), f) for k in ("tokenizer", "template")
              if (f := _file(r.get("spec", k))) is not None]
    _sources(r, files, source)  # type: ignore[arg-type]
    spec = ModelSpec(
        name=r.get("metadata", "name"),
        format=ModelFormat(r.get("spec", "format")),
        root=r.get("spec", "root"),
        shards=shards,  # type: ignore[arg-type]
        tokenizer=_file(r.get("spec", "tokenizer")),
        template=_file(r.get("spec", "template")),
        source=ModelSourceInfo(**source),
        ref=r.ref,
    )
    return (None if r.problems else spec), r.problems


def program_spec(doc: Document) -> tuple[ProgramSpec | None, list[Problem]]:
    """A ``kind: Program`` (BEHAVIOUR §14): files unique, sorted by path, the entrypoint one
    of them; a source URL that the fetch will accept."""
    r = _Reader(doc)
    files = tuple(ModelFile(path=f["path"], sha256=f["sha256"], size=int(f["size"]))
                  for f in r.get("spec", "files") or ())
    for i, f in enumerate(files):
        if i and f.path <= files[i - 1].path:
            r.add(("spec", "files", i, "path"),
                  f"duplicate file path {f.path!r}" if f.path == files[i - 1].path else
                  f"files must be sorted by path: {f.path!r} comes before {files[i - 1].path!r}")
    entry = r.get("spec", "entrypoint")
    if entry not in {f.path for f in files}:
        r.add(("spec", "entrypoint"), f"{entry!r} is not one of spec.files: the executable "
                                      "is checked by its digest like every other file")
    raw = r.get("spec", "source")
    source = None
    if raw is not None:
        _mirror(r, ("spec", "source", "url"), raw["url"])
        source = ProgramSource(url=raw["url"], sha256=raw["sha256"], size=int(raw["size"]),
                               strip=int(raw.get("strip", 0)))
    spec = ProgramSpec(name=r.get("metadata", "name"), runtime=Runtime(r.get("spec", "runtime")),
                       version=str(r.get("spec", "version")), entrypoint=entry, files=files,
                       root=r.get("spec", "root"), source=source, ref=r.ref)
    return (None if r.problems else spec), r.problems


def _restart(r: _Reader, *path: str) -> tuple[tuple[str, float], ...]:
    """The restart-policy fields set at ``path``, parsed."""
    raw = r.get(*path) or {}
    out: list[tuple[str, float]] = []
    if "max_restarts" in raw:
        out.append(("max_restarts", int(raw["max_restarts"])))
    for field in ("base", "cap", "stable_after", "startup_grace"):
        value = r.duration(*path, field)
        if field == "startup_grace" and value == 0:
            r.add((*path, field), "must be more than 0 seconds")  # else every start fails
        if value is not None:
            out.append((field, value))
    return tuple(out)


def _liveness(r: _Reader) -> LivenessSpec | None:
    """``spec.liveness`` (§4.1): present, even empty, turns the checks on; defaults fill it."""
    raw = r.get("spec", "liveness")
    if raw is None:
        return None
    defaults, values = LivenessSpec(), {}
    for field in ("period", "timeout", "grace"):
        value = r.duration("spec", "liveness", field)
        if value is not None and value == 0 and field != "grace":
            r.add(("spec", "liveness", field), "must be more than 0 seconds")
        values[field] = getattr(defaults, field) if value is None else value
    failures = raw.get("failures")
    return LivenessSpec(failures=defaults.failures if failures is None else int(failures),
                        **values)


def _host(r: _Reader) -> str:
    raw = r.get("spec", "serve", "host")
    if raw is None:
        return loopback.LOCALHOST_ADDRESS
    if not isinstance(raw, str) or not loopback.is_loopback_host(raw):
        r.add(("spec", "serve", "host"),
              f"{raw!r} is not a loopback address (use 127.0.0.1, ::1 or localhost)")
        return loopback.LOCALHOST_ADDRESS
    return loopback.normal_host(raw)


def role_draft(doc: Document, repo_files: roleextras.RepoFiles | None = None
               ) -> tuple[RoleDraft | None, list[Problem]]:
    r = _Reader(doc)
    name = r.get("metadata", "name")
    runtime = Runtime(r.get("spec", "runtime"))
    more_serve, more_role = roleextras.read(r.get, r.add, runtime, doc.file, repo_files)
    port = r.get("spec", "serve", "port")
    if port is None:
        port = spec_of(runtime).default_port
    serve = ServeSpec(
        host=_host(r),
        port=int(port) if port is not None else 0,
        ctx=int(r.get("spec", "serve", "ctx")) if r.get("spec", "serve", "ctx") else None,
        kv_quant=r.get("spec", "serve", "kv_quant"),
        draft_model=r.get("spec", "serve", "draft_model"),
        extra_args=tuple(r.get("spec", "serve", "extra_args") or ()),
        **more_serve,
    )
    excludes = frozenset(e.removeprefix("role:") for e in r.get("spec", "excludes") or ())
    state = WantedState(r.get("spec", "state") or WantedState.RUNNING)
    mode = Mode(r.get("spec", "mode"))
    idle_after = r.duration("spec", "idle_after")
    if idle_after == 0:
        r.add(("spec", "idle_after"), "must be more than 0 seconds")
    if state is WantedState.ON_DEMAND:
        _on_demand_rules(r, runtime, mode)
    spec = RoleSpec(
        name=name,
        runtime=runtime,
        mode=mode,
        model=r.get("spec", "model"),
        state=state,
        serve=serve,
        memory=MemorySpec(weights=0, kv=r.size("spec", "memory", "kv") or 0,
                          host=r.size("spec", "memory", "host") or 0),
        excludes=excludes,
        restart=RestartPolicy(),
        keep_alive=None,
        idle_after=idle_after or DEFAULT_IDLE_AFTER,
        liveness=_liveness(r),
        max_concurrency=r.get("spec", "max_concurrency"),
        restarted_at=r.get("spec", "restarted_at"),
        devices=devicedocs.role_devices(r, runtime, mode),
        replicas=_replicas(r, runtime, mode),
        shared_by_replicas=bool(r.get("spec", "placement", "devices", "shared_by_replicas")),
        program=r.get("spec", "program"),
        ref=r.ref,
        **more_role,
    )
    draft = RoleDraft(
        spec=spec,
        restart=_restart(r, "spec", "restart"),
        keep_alive=r.duration("spec", "keep_alive", negative=True),
        weights=r.size("spec", "memory", "weights"),
        placement=_placement(r),
        doc=doc,
    )
    return (None if r.problems else draft), r.problems


def _replicas(r: _Reader, runtime: Runtime, mode: Mode) -> int:
    """§12 ``spec.replicas``: only on a managed server the reconciler launches (one port each)."""
    raw = r.get("spec", "replicas")
    if raw is None:
        return 1
    if mode is not Mode.MANAGED or not spec_of(runtime).launched:
        r.add(("spec", "replicas"), f"replicas are for managed llamacpp and mlx-lm roles, not "
              f"{'an adopted role' if mode is not Mode.MANAGED else runtime} "
              "(the reconciler starts each instance on its own port)")
        return 1
    devices = r.get("spec", "placement", "devices") or {}
    if int(raw) > 1 and devices.get("ids") and not devices.get("shared_by_replicas"):
        r.add(("spec", "replicas"), f"{raw} instances cannot each have the devices "
              f"{', '.join(devices['ids'])} (two instances never share a device): use "
              "placement.devices.count, or placement.devices.shared_by_replicas: true")
    return int(raw)


def _on_demand_rules(r: _Reader, runtime: Runtime, mode: Mode) -> None:
    """§9 ``state: on-demand`` is for servers the reconciler launches and stops."""
    if mode is not Mode.MANAGED:
        r.add(("spec", "state"), "state: on-demand needs mode: managed "
              "(an adopted server is never started or stopped)")
    elif not spec_of(runtime).launched:
        r.add(("spec", "state"), f"state: on-demand is for servers the reconciler launches, "
              f"not {runtime} (Ollama loads a model on request by itself)")


def _labels(r: _Reader, path: tuple[str | int, ...]) -> dict[str, str]:
    """A mapping of label keys to values at ``path``, each checked (BEHAVIOUR §10)."""
    found = r.get(*path) or {}
    for key, value in found.items():
        problem = labels.key_problem(key) or labels.value_problem(value)
        if problem is not None:
            r.add(path + (key,), problem)
    return found


def _placement(r: _Reader) -> Placement | None:
    """``spec.placement``, its selector's operators checked against their values."""
    raw = r.get("spec", "placement")
    if raw is None:
        return None
    nodes = raw.get("nodes")
    raw_selector = raw.get("node_selector")
    if raw_selector is None:
        return Placement(nodes=frozenset(nodes) if nodes is not None else None)
    return Placement(nodes=frozenset(nodes) if nodes is not None else None,
                     selector=selector_at(r, ("spec", "placement", "node_selector")))


def selector_at(r: _Reader, base: tuple[str | int, ...]) -> labels.Selector:
    """The node selector at ``base`` (a placement's, a rollout wave's), its operators
    checked against their values."""
    raw_selector = r.get(*base) or {}
    match_labels = _labels(r, base + ("match_labels",))
    expressions = []
    for i, term in enumerate(raw_selector.get("match_expressions") or ()):
        here = base + ("match_expressions", i)
        key_problem = labels.key_problem(term["key"])
        if key_problem is not None:
            r.add(here + ("key",), key_problem)
        values = tuple(term.get("values") or ())
        wrong = labels.requirement_problem(labels.Operator(term["operator"]), values)
        if wrong is not None:
            index, message = wrong
            r.add(here + (("values", index) if index is not None else ("values",)
                          if "values" in term else ("operator",)), message)
        expressions.append((term["key"], term["operator"], values))
    return labels.selector(match_labels, tuple(expressions))
