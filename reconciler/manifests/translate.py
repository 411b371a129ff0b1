"""A server's command line → the fields of an InferenceSpec (PURE): ``reconcile import``.

The way in for people who already run ``llama-server`` or ``mlx_lm.server`` from a shell
script or llama-swap: each flag of the command line is looked up in its runtime's flag table
(``runtimes/flags.py``, the same table validation uses) and carried over to where our
manifests say it —

* the model and every other weight file (draft, projector, LoRA, adapter) → a Model reference
  (``ModelNeed``: the shell hashes the file, or writes a ``source`` for a Hub download);
* flags the reconciler owns → their field (``--port`` → ``spec.serve.port``, ``-c`` →
  ``spec.serve.ctx``, ``--alias`` → ``spec.aliases``, ``--api-key`` → ``api_key_file``), or
  dropped with the reason (``--host``: the reconciler binds loopback, clients come through
  the router);
* files the server reads (chat templates, grammars) → a path next to the manifest
  (``FileNeed``: the shell copies the file there);
* everything else the table allows → ``spec.serve.extra_args``, one argv element per value.

What cannot be carried (a flag that reaches the network, an unknown flag, a positional
argument) is a ``Note`` with ``kept=False`` and the reason; a line whose notes are all kept
is *expressed*. Nothing here reads a file or runs a shell: the argv is already split, as the
server would receive it.

Size: one translation per kind of flag (weight files, owned fields, server-read
files, extra_args), each with the reason a flag is carried, rewritten or
dropped.
"""

from __future__ import annotations

import enum
import re
from typing import Callable, Iterable, Protocol

import attrs

from reconciler.core.desired import Runtime
from reconciler.core.loopback import is_loopback_host
from reconciler.core.units import is_plain_token
from reconciler.runtimes import SPECS, flags as flag_tables, lookup as flag_lookup
from reconciler.runtimes.flags import Flag, FlagClass
from reconciler.runtimes.spec import CommandLine

frozen = attrs.frozen(kw_only=True)

#: Programs that run another program: ``numactl … llama-server`` is llama-server under numactl.
WRAPPERS = {"numactl", "nohup", "exec", "taskset", "nice", "ionice", "env", "stdbuf", "time"}


class Weight(enum.StrEnum):
    """Which weight file of a role a Model stands for."""

    MODEL = "model"
    DRAFT = "draft_model"
    MMPROJ = "mmproj"
    LORA = "loras"
    ADAPTER = "adapter"


@frozen
class ModelNeed:
    """A weight file the command names: a local path, or a Hugging Face repository (``-hf``)."""

    weight: Weight
    path: str | None = None
    hf_repo: str | None = None  # ORG/REPO[:QUANT] as llama-server's -hf takes it
    hf_file: str | None = None
    scale: float | None = None  # a LoRA's scale


@frozen
class FileNeed:
    """A file the server reads (a template, a grammar): copied next to the manifest."""

    flag: str
    path: str  # as the command named it

    @property
    def name(self) -> str:
        """Its name next to the manifest (the command's last path component)."""
        return self.path.replace("\\", "/").rsplit("/", 1)[-1]


@frozen
class Note:
    """What happened to one flag (or word) of the command line."""

    flag: str
    kept: bool
    what: str
    dropped: bool = False  # kept, but not written: the reconciler does it its own way
    changed: bool = False  # kept, written differently (a port, a spelling): said, still whole

    def __str__(self) -> str:
        return f"{self.flag}: {self.what}"


@frozen
class Translation:
    """A command line as our documents see it; ``expressed`` when nothing was lost."""

    runtime: Runtime
    program: str
    serve: dict  # spec.serve without the model references
    aliases: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    models: tuple[ModelNeed, ...]
    files: tuple[FileNeed, ...]
    notes: tuple[Note, ...]
    api_key: bool = False  # the command set --api-key: the spec names a key file instead

    @property
    def expressed(self) -> bool:
        return all(n.kept for n in self.notes)

    @property
    def lost(self) -> tuple[Note, ...]:
        return tuple(n for n in self.notes if not n.kept)


class FlagTable(Protocol):
    def __call__(self, runtime: Runtime, spelling: str) -> Flag | None: ...


# Flags whose value becomes a field of spec.serve (by any of the flag's spellings).
_SERVE_FIELDS = {
    "--port": ("port", int),
    "--ctx-size": ("ctx", int),
    "--cache-type-k": ("cache_type_k", str),
    "--cache-type-v": ("cache_type_v", str),
    "--api-key-file": ("api_key_file", str),
}
_WEIGHTS = {
    "--model": Weight.MODEL, "--model-draft": Weight.DRAFT, "--draft-model": Weight.DRAFT,
    "--mmproj": Weight.MMPROJ, "--lora": Weight.LORA, "--lora-scaled": Weight.LORA,
    "--adapter-path": Weight.ADAPTER,
}
_WEIGHT_FIELD = {
    Weight.MODEL: "spec.model", Weight.DRAFT: "spec.serve.draft_model",
    Weight.MMPROJ: "spec.serve.mmproj", Weight.LORA: "spec.serve.loras",
    Weight.ADAPTER: "spec.serve.adapter",
}
#: ORG/REPO as the Hub names a repository (mlx_lm.server's --model takes one and downloads it).
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_HF = {"--hf-repo": Weight.MODEL, "--hf-repo-draft": Weight.DRAFT}


def servers() -> list[tuple[Runtime, CommandLine]]:
    """Each launched runtime and how a command line names its server (the registry says)."""
    return [(spec.runtime, spec.command_line) for spec in SPECS.values() if spec.command_line]


def _forms(words: list[str], i: int, forms: Iterable[str]) -> int:
    """How many words at ``i`` spell one of ``forms`` (``mlx_lm server`` is two), or 0."""
    for form in forms:
        parts = form.split()
        if words[i:i + len(parts)] == parts:
            return len(parts)
    return 0


def program_of(argv: Iterable[str]) -> tuple[tuple[tuple[str, str], ...], list[str], list[Note]]:
    """Split ``ENV=V… [wrapper…] PROGRAM ARGS…`` into env, the server's argv, and notes."""
    words = list(argv)
    env: list[tuple[str, str]] = []
    notes: list[Note] = []
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, value = word.partition("=")
        if eq and name.isidentifier() and not word.startswith("-"):
            env.append((name, value))
            i += 1
            continue
        base = word.replace("\\", "/").rsplit("/", 1)[-1]
        if base in WRAPPERS:
            notes.append(Note(flag=base, kept=True, dropped=True, what="a wrapper of the "
                              "server: not carried over (the reconciler starts the server itself)"))
            i += 1
            while i < len(words) and words[i].startswith("-"):  # the wrapper's own options
                i += 1
            continue
        python_m = base.startswith("python") and words[i + 1:i + 2] == ["-m"]
        at = i + 2 if python_m else i
        for _, command in servers():
            taken = _forms(words, at, command.modules)
            if taken and (python_m or " " in " ".join(words[at:at + taken])):
                return tuple(env), [command.programs[0], *words[at + taken:]], notes
        return tuple(env), words[i:], notes
    return tuple(env), [], notes


def translate(argv: Iterable[str], *, lookup: FlagTable = flag_lookup,
              port: int | None = None) -> Translation:
    """Translate one command line (``[ENV=V…] [wrapper…] llama-server ARGS…``).

    ``port`` fills a missing ``--port`` (llama-swap gives each model one); ValueError when
    the program is not a server we run.
    """
    env, words, notes = program_of(argv)
    if not words:
        raise ValueError("no server program in the command line")
    program = words[0]
    base = program.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".exe")
    found = [(r, c) for r, c in servers() if c.names(base)]
    if not found:
        known = ", ".join(c.programs[0] for _, c in servers())
        raise ValueError(f"{base!r} is not a server the reconciler runs (it runs {known})")
    ((runtime, command),) = found
    args = words[1:]
    if command.modernise is not None:
        args, rewrites = command.modernise(args, lambda spelling: lookup(runtime, spelling))
        notes += [Note(flag=r.flag, kept=True, what=r.what, dropped=r.dropped,
                       changed=not r.dropped) for r in rewrites]
    state = _State(runtime=runtime, command=command, lookup=lookup, notes=notes)
    state.walk(args)
    if "port" not in state.serve and port is not None:
        state.serve["port"] = port
    if not any(m.weight is Weight.MODEL for m in state.models):
        state.notes.append(Note(flag="--model", kept=False, what="no model: the command names none"))
    return Translation(
        runtime=runtime, program=program, serve=state.serve, aliases=tuple(state.aliases),
        env=env, models=tuple(state.models), files=tuple(state.files),
        notes=tuple(state.notes), api_key=state.api_key)


@attrs.define
class _State:
    """The walk over one command line's words (mutable, local to ``translate``)."""

    runtime: Runtime
    command: CommandLine
    lookup: Callable[[Runtime, str], Flag | None]
    notes: list[Note]
    serve: dict = attrs.Factory(dict)
    aliases: list[str] = attrs.Factory(list)
    models: list[ModelNeed] = attrs.Factory(list)
    files: list[FileNeed] = attrs.Factory(list)
    extra: list[str] = attrs.Factory(list)
    api_key: bool = False
    hf_file: str | None = None

    def walk(self, words: list[str]) -> None:
        i = 0
        while i < len(words):
            word = words[i]
            i += 1
            if not word.startswith("-") or word == "-":
                self.notes.append(Note(flag=word, kept=False, what="a positional argument: "
                                       f"{self.runtime_name} takes none (a flag missing before it?)"))
                continue
            spelling, eq, inline = word.partition("=")
            flag = self.lookup(self.runtime, spelling)
            if flag is None:
                self.notes.append(Note(flag=spelling, kept=False,
                                       what=f"not a flag of {self.runtime_name}"))
                continue
            value: str | None = inline if eq else None
            if value is None and flag.takes_value:
                given = words[i:i + flag.count]
                if len(given) < flag.count or _is_next_flag(flag, given[0]):
                    choices = f" ({'|'.join(flag.choices)})" if flag.choices else ""
                    self.notes.append(Note(flag=spelling, kept=False, what=(
                        f"needs a value{choices} in this {self.runtime_name}; the line may be "
                        "written for an older release")))
                    continue
                i += flag.count
                if flag.count > 1:  # a pair of values (a layer range): only ever extra_args
                    if self.refused(flag, spelling, given):
                        continue
                    self.extra.extend([spelling, *given])
                    self.keep(spelling, "extra_args")
                    continue
                value = given[0]
            self.carry(flag, spelling, value)
        if self.hf_file is not None:
            for k, need in enumerate(self.models):
                if need.weight is Weight.MODEL and need.hf_repo is not None:
                    self.models[k] = attrs.evolve(need, hf_file=self.hf_file)
        if self.extra:
            self.serve["extra_args"] = list(self.extra)

    @property
    def runtime_name(self) -> str:
        return self.command.programs[0]

    def carry(self, flag: Flag, spelling: str, value: str | None) -> None:
        names = set(flag.spellings)
        field = next((_SERVE_FIELDS[s] for s in names if s in _SERVE_FIELDS), None)
        weight = next((_WEIGHTS[s] for s in names if s in _WEIGHTS), None)
        hf = next((_HF[s] for s in names if s in _HF), None)
        if weight is not None and value is not None:
            self.weight(weight, spelling, value)
        elif hf is not None and value is not None:
            self.models.append(ModelNeed(weight=hf, hf_repo=value))
            self.keep(spelling, f"a Model with a Hugging Face source ({value}): "
                      "pin its revision and digests with `reconcile models add hf://…`")
        elif "--hf-file" in names and value is not None:
            self.hf_file = value
            self.keep(spelling, "the file of the Model's Hugging Face source")
        elif field is not None and value is not None:
            name, kind = field
            if name == "ctx" and value == "0":  # llama-server's own default: the model's context
                self.keep(spelling, "0 is the model's own context: no spec.serve.ctx", dropped=True)
                return
            try:
                self.serve[name] = kind(value)
            except ValueError:
                self.notes.append(Note(flag=spelling, kept=False, what=f"{value!r} is not a number"))
                return
            self.keep(spelling, f"spec.serve.{name}")
        elif "--alias" in names and value is not None:
            self.aliases.extend(a for a in value.split(",") if a)
            self.keep(spelling, "spec.aliases")
        elif "--api-key" in names:
            self.api_key = True
            self.keep(spelling, "spec.serve.api_key_file (keys never go in git: write the key "
                      "to that file on the node)", dropped=True)
        elif "--host" in names:
            self.host(spelling, value or "")
        elif flag.cls is FlagClass.FILE and value is not None:
            need = FileNeed(flag=spelling, path=value)
            self.files.append(need)
            self.extra.extend([spelling, need.name])
            self.keep(spelling, f"extra_args, the file {need.name} next to the manifest")
        elif flag.cls in (FlagClass.ALLOWED, FlagClass.DEVICE):
            if value is not None and self.refused(flag, spelling, [value]):
                return
            self.extra.append(spelling)
            if value is not None:
                self.extra.append(value)
            self.keep(spelling, "extra_args")
        elif flag.cls is FlagClass.OWNED:
            self.keep(spelling, f"owned by the reconciler: {flag.instead}", dropped=True)
        else:  # NETWORK, EXPECTS, or a weight flag without its value
            self.notes.append(Note(flag=spelling, kept=False, what=flag.instead or str(flag.cls)))

    def weight(self, weight: Weight, spelling: str, value: str) -> None:
        if weight is Weight.LORA:
            for item in (v for v in value.split(",") if v):
                path, scale = item, None
                if spelling.endswith("-scaled"):
                    path, _, text = item.rpartition(":")
                    try:
                        scale = float(text)
                    except ValueError:
                        self.notes.append(Note(flag=spelling, kept=False,
                                               what=f"{item!r} is not FILE:SCALE"))
                        continue
                self.models.append(ModelNeed(weight=weight, path=path, scale=scale))
        elif self.command.hub_models and _HUB_ID.fullmatch(value):
            # mlx_lm.server --model ORG/REPO downloads it: a Model with a Hub source
            self.models.append(ModelNeed(weight=weight, hf_repo=value))
            self.keep(spelling, f"a Model with a Hugging Face source ({value}): pin its "
                      "revision and digests with `reconcile models add hf://…`")
            return
        else:
            self.models.append(ModelNeed(weight=weight, path=value))
        self.keep(spelling, f"a Model ({_WEIGHT_FIELD[weight]})")

    def host(self, spelling: str, value: str) -> None:
        hosts = [h for h in value.split(",") if h]
        if hosts and all(is_loopback_host(h) for h in hosts):
            self.keep(spelling, "loopback, as the reconciler binds (§5)")
        else:
            self.keep(spelling, f"{value!r} not carried: the reconciler binds loopback only (§5); "
                      "clients on other machines reach it through a proxy you run", dropped=True)

    def refused(self, flag: Flag, spelling: str, values: list[str]) -> bool:
        """A value the flag table refuses (``--n-gpu-layers 100,100``) is not carried: the
        table's own words say why, and the line is not whole (§1.7)."""
        for value in values:
            problem = flag_tables.value_problem(flag, spelling, value)
            if problem is not None:
                self.notes.append(Note(flag=spelling, kept=False, what=problem))
                return True
        return False

    def keep(self, spelling: str, what: str, *, dropped: bool = False) -> None:
        self.notes.append(Note(flag=spelling, kept=True, what=what, dropped=dropped))


def _is_next_flag(flag: Flag, word: str) -> bool:
    """``word`` is the next flag, not this one's value (``-fa --temp 0.6``: an old ``-fa``)."""
    return word.startswith("-") and word not in flag.choices and not flag_tables.is_number(word)


def role_name(text: str) -> str:
    """A plain-token role name for a llama-swap model id or a file name."""
    out = "".join(c if c.isalnum() or c in "._-" else "-" for c in text).strip("-.")
    out = out[:64] or "role"
    return out if is_plain_token(out) and out[0].isalnum() else f"r-{out}"[:64]
