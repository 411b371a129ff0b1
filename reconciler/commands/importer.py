"""``reconcile import``: manifests from a llama-swap config or a server command line (SHELL).

``reconcile import cmd [-o DIR] -- llama-server -m … --port …`` and
``reconcile import llama-swap CONFIG.yaml [-o DIR]`` translate (``manifests/translate.py``,
``manifests/llamaswap.py``, both pure), then do the parts that touch this machine: hash the
weight files that exist here (as ``reconcile models add`` does), copy the files the server
reads (chat templates, grammars) next to the manifests, find the server program on PATH,
write the documents, and validate the result as ``reconcile validate`` would. Every flag that
could not be carried over is printed with its reason; nothing is started.

Exit codes: 0 written and valid; 1 written but not valid yet (a model is not on this machine,
a file to copy is missing: the printed steps finish it), or nothing written (bad input, or
the output directory already holds a file it would write).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys

import attrs
import yaml

from reconciler.commands import common, models as model_commands
from reconciler.commands import options as opt
from reconciler.commands.options import GlobalOptions
from reconciler.core.desired import ModelFormat, Runtime
from reconciler.core.exitcodes import Exit
from reconciler.manifests import importdocs, llamaswap, modeldoc, translate
from reconciler.manifests.importdocs import Located, RoleDraft
from reconciler.manifests.translate import ModelNeed, Note
from reconciler.runtimes import flags_for, llamacpp_tables, spec_of

MAX_COPIED_FILE = 1 << 20  # what a manifest may carry as a server-read file (§1)


@attrs.frozen(kw_only=True)
class ImportCmdOptions:
    command: tuple[str, ...] = attrs.field(default=(), converter=opt.tuple_of)
    name: str | None = None
    output: str | None = None
    program_version: str | None = None


@attrs.frozen(kw_only=True)
class ImportSwapOptions:
    config: str
    listen: int = 8080
    output: str | None = None
    program_version: str | None = None


def _lookup(version: str | None):  # type: ignore[no-untyped-def]
    """§1.7 the lookup the lines are read with: the table a Program of ``version`` has."""
    if version is None:
        return translate.flag_lookup
    if llamacpp_tables.number(version) is None:
        raise ValueError(f"--program-version {version!r}: a llama.cpp build, b<number> (b5361)")
    return lambda runtime, spelling: flags_for(runtime, version).find(spelling)


def run_cmd(g: GlobalOptions, o: ImportCmdOptions) -> int:
    """``reconcile import cmd -- llama-server …``."""
    try:
        argv = [a for a in o.command if a != "--"]
        tr = translate.translate(argv, lookup=_lookup(o.program_version))
        name = o.name or translate.role_name(importdocs.model_name(tr.models[0])
                                             if tr.models else "role")
        drafts, router, config_notes = [RoleDraft(name=name, translation=tr)], None, ()
    except (OSError, ValueError, yaml.YAMLError) as e:
        print(f"reconcile: error: {e}", file=sys.stderr)
        return Exit.ERROR
    return _write(drafts, router, config_notes, out=o.output or ".", version=o.program_version)


def run_swap(g: GlobalOptions, o: ImportSwapOptions) -> int:
    """``reconcile import llama-swap CONFIG.yaml``."""
    try:
        _lookup(o.program_version)  # a bad --program-version: refused before anything
        drafts, router, config_notes = _swap_drafts(o.config, o.listen, o.program_version)
    except (OSError, ValueError, yaml.YAMLError) as e:
        print(f"reconcile: error: {e}", file=sys.stderr)
        return Exit.ERROR
    if not drafts:
        print(f"reconcile: error: no model of {o.config} could be imported (above: why); "
              "nothing written", file=sys.stderr)
        return Exit.ERROR
    return _write(drafts, router, config_notes, out=o.output or ".", version=o.program_version)


def _swap_drafts(path: str, listen: int, version: str | None = None
                 ) -> tuple[list[RoleDraft], int, tuple[Note, ...]]:
    with open(path, "rb") as f:
        config = llamaswap.parse(f.read())
    if not isinstance(config, dict):
        raise ValueError(f"{path}: not a llama-swap config (a YAML mapping)")
    swap = llamaswap.read(config, listen_port=listen, environ=os.environ)
    drafts = []
    for m in swap.models:
        try:
            tr = translate.translate(m.argv, port=m.port, lookup=_lookup(version))
        except ValueError as e:
            why = next((str(n) for n in m.notes if n.flag == "cmd" and not n.kept), e)
            print(f"{m.model_id}: not imported: {why}", file=sys.stderr)
            continue
        drafts.append(RoleDraft(name=m.role, translation=tr, state="on-demand",
                                idle_after=m.idle_after, aliases=m.aliases, env=m.env,
                                excludes=m.excludes, notes=m.notes,
                                max_concurrency=m.max_concurrency))
    imported = {f"role:{d.name}" for d in drafts}  # excludes name only roles written
    drafts = [attrs.evolve(d, excludes=tuple(e for e in d.excludes if e in imported))
              for d in drafts]
    return importdocs.distinct_ports(drafts, reserved=[swap.router_port]), swap.router_port, \
        swap.notes


def _write(drafts: list[RoleDraft], router: int | None, config_notes: tuple[Note, ...], *,
           out: str, version: str | None = None) -> int:
    drafts = [importdocs.checked_env(d) for d in drafts]
    needs = [n for d in drafts for n in d.translation.models]
    located, unlocated = _locate(needs, importdocs.model_names(needs))
    programs = {r: _program(r, drafts) for r in {d.translation.runtime for d in drafts}}
    drafts = [_other_program(d, programs) for d in drafts]
    pinned, pin_steps = _pinned(programs, version, out)
    written = importdocs.documents(drafts, located, programs=programs, router_port=router)
    written = attrs.evolve(written, documents=(*pinned, *written.documents))
    files = _file_plan(drafts, out)
    targets = _targets(written.documents, out)
    clash = [p for p in [*targets, *(dst for _, dst in files)] if os.path.exists(p)]
    if clash:
        print(f"reconcile: error: {clash[0]} exists: import writes only new files "
              "(choose an empty directory with -o)", file=sys.stderr)
        return Exit.ERROR
    os.makedirs(out, exist_ok=True)
    for path, docs in targets.items():
        text = "---\n".join(modeldoc.render_document(d, None) for d in docs)
        with open(path, "x") as f:
            f.write(text)
        print(f"wrote {path}", file=sys.stderr)
    steps = [*pin_steps, *_copy(files)]
    problems = _problems(out)
    _report(drafts, config_notes, written.missing, unlocated, steps,
            whole=_whole(drafts, problems, [name for name, _ in written.missing]))
    if problems:
        common.report_problems(problems)
        print(f"{out}: written, not valid yet: finish the steps above", file=sys.stderr)
        return Exit.ERROR
    print(f"{out}: valid", file=sys.stderr)
    return Exit.OK


def _locate(needs: list[ModelNeed], names: dict[ModelNeed, str]
            ) -> tuple[dict[ModelNeed, Located], dict[ModelNeed, str]]:
    """Hash the weight files that are on this machine; say why for the others (the step to
    finish names the Model as the roles do, ``--name`` where that is not the file's stem)."""
    located: dict[ModelNeed, Located] = {}
    why: dict[ModelNeed, str] = {}
    for need in needs:
        if need in located or need in why:
            continue
        if need.path is None:
            repo = need.hf_repo or ""
            why[need] = (f"downloads from the Hub ({repo}): run `reconcile models add "
                         f"hf://{repo.split(':')[0]}/FILE@COMMIT` to pin it")
            continue
        path = os.path.expanduser(need.path)
        if llamaswap.is_windows([need.path]):
            file = need.path.replace("\\", "/").rsplit("/", 1)[-1]
            why[need] = (f"{need.path} is a Windows path, not on this machine: copy the file "
                         f"here and run `reconcile models add {shlex.quote('DIR/' + file)} "
                         f"--name {names[need]}`")
            continue
        if not os.path.exists(path):
            named = "" if names[need] == importdocs.model_name(need) else \
                f" --name {names[need]}"
            why[need] = f"{need.path} is not on this machine: run `reconcile models add " \
                        f"{need.path}{named}` where it is"
            continue
        try:
            doc = model_commands.files_document(path, name=names[need])
        except (OSError, ValueError) as e:
            why[need] = f"{need.path}: {e}"
            continue
        spec = doc["spec"]
        located[need] = Located(root=spec["root"], fmt=ModelFormat(spec["format"]), shards=tuple(
            modeldoc.FileFact(path=s["path"], size=s["size"], sha256=s["sha256"])
            for s in spec["shards"]))
    return located, why


def _program(runtime: Runtime, drafts: list[RoleDraft]) -> str:
    given = next((d.translation.program for d in drafts if d.translation.runtime is runtime
                  and os.path.isabs(d.translation.program)), None)
    name = spec_of(runtime).command_line.programs[0]
    found = given or shutil.which(name)
    return os.path.realpath(found) if found else f"/usr/local/bin/{name}"


def _pinned(programs: dict[Runtime, str], version: str | None, out: str
            ) -> tuple[tuple[dict, ...], list[str]]:
    """§1.7 ``--program-version``: the llama-server the lines run, pinned as a Program of that
    version when it is on this machine (as ``programs add``), the NodeConfig then naming it
    (``programs`` is changed in place); else the step that pins it."""
    runtime = next((r for r in programs if getattr(spec_of(r).command_line, "modernise", None)),
                   None)  # the runtime whose lines are read per build (llama-server's)
    if version is None or runtime is None:
        return (), []
    from reconciler.commands import programs as program_commands
    path = programs[runtime]
    try:
        doc = program_commands.program_document(path, version=version, runtime=str(runtime))
    except (OSError, ValueError):
        return (), [f"pin the llama-server these lines run as {version}: `reconcile programs "
                    f"add PATH --version {version} -o {os.path.join(out, 'program.yaml')}`, and "
                    f"name it in node.yaml's serve_programs (now {path}, judged as b11434)"]
    programs[runtime] = doc["metadata"]["name"]
    print(f"pinned {path} as Program {programs[runtime]} ({version})", file=sys.stderr)
    return (doc,), []


def _other_program(draft: RoleDraft, programs: dict[Runtime, str]) -> RoleDraft:
    """A line that ran another build of its server than the node's one program: said, not
    whole (a role-level program is not here yet; until then its binary is not carried)."""
    program = draft.translation.program
    chosen = programs[draft.translation.runtime]
    if not os.path.isabs(program) or os.path.realpath(program) == chosen:
        return draft
    note = Note(flag=program, kept=False, what=f"another build than the node's {chosen}: "
                "every role of a runtime runs the node's one program (serve_programs)")
    return attrs.evolve(draft, notes=(*draft.notes, note))


def _file_plan(drafts: list[RoleDraft], out: str) -> list[tuple[str, str]]:
    return [(os.path.expanduser(f.path), os.path.join(out, f.name))
            for d in drafts for f in d.translation.files]


def _copy(files: list[tuple[str, str]]) -> list[str]:
    steps = []
    for src, dst in files:
        try:
            if os.path.getsize(src) > MAX_COPIED_FILE:
                steps.append(f"{src} is over 1 MiB: a manifest cannot carry it")
                continue
            shutil.copyfile(src, dst)
            print(f"copied {src} → {dst}", file=sys.stderr)
        except OSError:
            steps.append(f"copy {src} to {dst} (not on this machine)")
    return steps


def _targets(documents: tuple[dict, ...], out: str) -> dict[str, list[dict]]:
    targets: dict[str, list[dict]] = {}
    for doc in documents:
        kind = doc["kind"]
        name = {"NodeConfig": "node.yaml", "Model": "models.yaml"}.get(
            kind, f"{doc['metadata']['name']}.yaml")
        targets.setdefault(os.path.join(out, name), []).append(doc)
    return targets


def _whole(drafts: list[RoleDraft], problems, missing: list[str]) -> set[str]:
    """The roles counted whole (§1.7): nothing lost, and what was written validates — but for
    a Model that is not on this machine yet (its `to finish:` step). A problem outside the
    roles' own files (the node, the models) leaves no role whole."""
    waiting = tuple(f"no Model named {name!r}" for name in missing)
    real = [p for p in problems if not any(w in p.message for w in waiting)]
    files = {f"{d.name}.yaml" for d in drafts}
    if any(os.path.basename(p.file) not in files for p in real):
        return set()
    invalid = {os.path.basename(p.file) for p in real}
    return {d.name for d in drafts if d.translation.expressed
            and not any(not n.kept for n in d.notes) and f"{d.name}.yaml" not in invalid}


def _report(drafts, config_notes, missing, unlocated, steps, *, whole: set[str]) -> None:
    for note in config_notes:
        print(f"not carried: {note}", file=sys.stderr)
    for d in drafts:
        for note in (*d.translation.notes, *d.notes):
            if not note.kept:
                print(f"{d.name}: not carried: {note}", file=sys.stderr)
            elif note.dropped:
                print(f"{d.name}: dropped: {note}", file=sys.stderr)
            elif note.changed:
                print(f"{d.name}: changed: {note}", file=sys.stderr)
    for name, need in missing:
        print(f"to finish: Model {name}: {unlocated.get(need, 'not found')}", file=sys.stderr)
    for step in dict.fromkeys(steps):  # one file two roles read: one step
        print(f"to finish: {step}", file=sys.stderr)
    print(f"{len(whole)} of {len(drafts)} command lines carried over whole", file=sys.stderr)


def _problems(out: str) -> list:
    """What ``reconcile validate`` would say of the written directory."""
    from reconciler.repo import sources

    return list(sources.load_desired([out]).problems)
