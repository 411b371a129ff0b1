"""Instance ids, launches and launch digests (PURE; BEHAVIOUR §3, §6).

``launch()`` builds the exact argv, environment, working directory and uid a
managed server is started with. The caller (the shell) passes the
reconciler's own environment in as a value, so this stays pure and the
digest is reproducible in tests.

Size: the launch and its digest are one idea — what a role runs, byte for byte (argv,
environment, program, devices) — and what the digest covers must be read beside how the
launch is built, so they stay together.
"""

from __future__ import annotations

import functools
import hashlib
from json.encoder import encode_basestring_ascii as _json_string
from typing import Mapping, Sequence

from reconciler.core.devices import Assignment
from reconciler.core.desired import (Launch, ModelSpec, NodeConfig, ProgramSpec, RoleSpec,
                                     document_name, is_program_path)
from reconciler.core.ownership import MARKER_ENV
from reconciler.runtimes import launch_argv, spec_of

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
#: §14 the Program a server runs, in its environment (and so in its launch digest): a new
#: Program (another version or file list) is a new generation even at the same path.
PROGRAM_ENV = "RECONCILER_PROGRAM"


def instance_id(role: RoleSpec) -> str:
    """``<name>-<8 hex of sha256(name|runtime|model|host:port|mode)>``.

    §12 an instance ``chat/2`` is ``chat.2-…`` (one directory under the data root: no
    ``/``); the digest is of its own name, so no role named ``chat.2`` shares it. §13 the
    Model's own name: a role kept on an earlier revision's document keeps its id.
    """
    key = "|".join(
        [role.name, str(role.runtime), document_name(role.model or ""), role.serve.address,
         str(role.mode)]
    )
    return f"{role.name.replace('/', '.')}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def generation(runs: str, restarted_at: str | None) -> str:
    """A role's generation (§4): what it runs, and its ``spec.restarted_at``.

    ``runs`` is a launched role's launch digest, or ``load_runs(…)`` for a
    role that loads a model into a server it never launches. Without
    ``restarted_at`` the generation *is* ``runs``, so a record written before
    generations existed (it has only its launch digest) reads as the same
    generation as long as nothing changes.
    """
    if restarted_at is None:
        return runs
    return hashlib.sha256(f"{runs}\nrestarted_at={restarted_at}".encode()).hexdigest()


def load_runs(tag: str | None, keep_alive: float | None) -> str:
    """What an Ollama role runs: the tag it loads and the keep_alive it loads it with."""
    return f"load {tag or ''} keep_alive={keep_alive if keep_alive is not None else ''}"


def child_env(
    node: NodeConfig, environ: Mapping[str, str], instance: str
) -> tuple[tuple[str, str], ...]:
    """The child's environment, built from nothing (BEHAVIOUR §6).

    Order of precedence: the default PATH, then NodeConfig ``env``, then each
    passthrough variable that is set (an explicit or passed-through PATH
    wins over the default), then the ownership marker, which nothing overrides.
    """
    env: dict[str, str] = {"PATH": DEFAULT_PATH}
    env.update(dict(node.env))
    for name in node.env_passthrough:
        if name in environ:
            env[name] = environ[name]
    env[MARKER_ENV] = instance
    return tuple(sorted(env.items()))


def launch(
    role: RoleSpec,
    models: Mapping[str, ModelSpec],
    node: NodeConfig,
    environ: Mapping[str, str],
    data_root: str,
    programs: tuple[ProgramSpec, ...] = (),
) -> Launch | None:
    """The canonical launch of a managed role, or None (a runtime it never launches)."""
    launcher = Launcher(node, environ, data_root, programs)
    argv = launcher.argv(role, models)
    return launcher.launch(argv, instance_id(role), role=role) if argv is not None else None


class Launcher:
    """Launches of one node's roles: what they share is worked out once.

    The planner digests every managed role's launch on every pass; the program
    table, the environment around the marker and their digest text are the
    same for all of them. In three steps, so that a role whose launch is only
    compared (a server in sync) never builds the rest: ``argv`` →
    ``digest`` → ``launch``.
    """

    def __init__(self, node: NodeConfig, environ: Mapping[str, str], data_root: str,
                 programs: tuple[ProgramSpec, ...] = ()) -> None:
        self.run_as = node.run_as
        self._pinned = {p.name: p for p in programs}  # §14 Programs by name
        #: §14 by the path they run from: a restart names the versions, not the paths.
        self.by_executable = {p.executable: p for p in programs if p.executable}
        self.devices = {d.id: d for d in node.devices}  # §7.1 by id, for the planner
        self._programs = dict(node.serve_programs)
        self._root = f"{data_root.rstrip('/')}/"
        # JSON encodes character by character: the text of root + instance is the
        # root's text without its closing quote, then the instance's without its opening one.
        self._cwd_text = _json_string(self._root)[:-1]
        env = dict(child_env(node, environ, ""))
        del env[MARKER_ENV]  # the marker is the instance's own, and overrides any other
        # Passed-through values (HOME, PATH, …) come from whoever runs the
        # reconciler: cron, systemd and an operator's shell differ. The digest
        # names them but ignores their values, so running `reconcile --once` from
        # another shell restarts nothing; a server takes them when it (re)starts.
        passed = {name for name in node.env_passthrough if name in environ}
        self._marker_passed = MARKER_ENV in passed
        before = [(k, v) for k, v in sorted(env.items()) if k < MARKER_ENV]
        after = [(k, v) for k, v in sorted(env.items()) if k > MARKER_ENV]
        self._env_before, self._env_after = tuple(before), tuple(after)
        self._text_before = "".join(
            f"{_pair(k, '<passed through>' if k in passed else v)}, " for k, v in before)
        self._text_after = "".join(
            f", {_pair(k, '<passed through>' if k in passed else v)}" for k, v in after)
        self._pair_texts = {k: _pair(k, '<passed through>' if k in passed else v)
                            for k, v in (*before, *after)}
        self._extra_texts: dict[tuple[tuple[str, str], ...], tuple[str, str]] = {}
        self._text_run_as = (f"[{int(self.run_as.uid)}, {int(self.run_as.gid)}]"
                             if self.run_as is not None else "null")

    def argv(self, role: RoleSpec, models: Mapping[str, ModelSpec],
             assignment: Assignment | None = None) -> tuple[str, ...] | None:
        """The command line of a managed role, or None (a runtime it never launches).

        With an ``assignment`` the runtime's device flags follow it (``--tensor-split``).
        """
        rt = spec_of(role.runtime)
        if not rt.launched or not role.managed:
            return None
        program = self.executable(role)
        model = models.get(role.model or "")
        draft = models.get(role.serve.draft_model or "")
        pinned = self.pinned(role)  # §14 its build's flag table cuts --flag=value (§1.4)
        args = launch_argv(role, model, draft, models,
                           pinned.version if pinned is not None else None)
        if assignment and rt.devices is not None:
            return (program, *args, *rt.devices.argv(assignment))
        return (program, *args)

    def pinned(self, role: RoleSpec) -> ProgramSpec | None:
        """§14 the Program a role runs: its ``spec.program``, else the node's; None for a path."""
        name = role.program or self._programs.get(role.runtime)
        return None if name is None or is_program_path(name) else self._pinned.get(name)

    def programs_at(self, path: str) -> list[ProgramSpec]:
        """§14 every Program of this node that runs from ``path`` (versions at one path)."""
        return [p for p in self._pinned.values() if p.executable == path]

    def executable(self, role: RoleSpec) -> str:
        """argv[0]: the Program's entrypoint in its root, or the path as written."""
        name = role.program or self._programs.get(role.runtime)
        if name is None or is_program_path(name):
            return name or f"<no serve_programs.{role.runtime}>"
        found = self._pinned.get(name)  # spawn refuses the relative text below
        return (found.executable if found and found.executable
                else f"<Program {name} is not on this node>")

    def _role_env(self, role: RoleSpec | None, extra_env: tuple[tuple[str, str], ...]
                  ) -> tuple[tuple[str, str], ...]:
        env = _with_role_env(role, extra_env)
        program = self.pinned(role) if role is not None else None
        return env if program is None else (*env, (PROGRAM_ENV, program.label))

    def digest(self, argv: tuple[str, ...], instance: str,
               extra_env: tuple[tuple[str, str], ...] = (), role: RoleSpec | None = None) -> str:
        """sha256 of ``canonical(argv, digest env, cwd, run_as)``, from the parts worked out once.

        ``extra_env``: the device visibility variables of an assignment (they win
        over NodeConfig ``env`` and passthrough, as the marker does). ``role``: its own
        ``spec.env`` joins before them (BEHAVIOUR §1.2).
        """
        extra_env = self._role_env(role, extra_env)
        instance_text = _json_string(instance)
        before, after = self._env_texts(extra_env) if extra_env else (
            self._text_before, self._text_after)
        marker = _pair(MARKER_ENV, "<passed through>") if self._marker_passed else (
            f"[{_json_string(MARKER_ENV)}, {instance_text}]")
        text = (f'{{"argv": [{", ".join(map(_json_string, argv))}], '
                f'"cwd": {self._cwd_text}{instance_text[1:]}, '
                f'"env": [{before}{marker}{after}], '
                f'"run_as": {self._text_run_as}}}')
        return hashlib.sha256(text.encode()).hexdigest()

    def _env_texts(self, extra_env: tuple[tuple[str, str], ...]) -> tuple[str, str]:
        """The digest text of the env pairs before and after the marker, with ``extra_env``
        replacing or joining the base pairs (the marker is never among them: the
        instance's own wins). Worked out once per ``extra_env``: a node's roles share a few."""
        got = self._extra_texts.get(extra_env)
        if got is None:
            texts = dict(self._pair_texts)
            texts.update((k, _pair(k, v)) for k, v in extra_env if k != MARKER_ENV)
            keys = sorted(texts)
            got = ("".join(f"{texts[k]}, " for k in keys if k < MARKER_ENV),
                   "".join(f", {texts[k]}" for k in keys if k > MARKER_ENV))
            if len(self._extra_texts) >= 4096:
                self._extra_texts.clear()
            self._extra_texts[extra_env] = got
        return got

    def launch(self, argv: tuple[str, ...], instance: str, digest: str | None = None,
               extra_env: tuple[tuple[str, str], ...] = (), role: RoleSpec | None = None
               ) -> Launch:
        """The whole launch (``digest``: this argv's and instance's, when known already).

        ``role``: its ``spec.env`` joins the environment, its repository files are
        copied into the instance directory (their names in argv carry their digests),
        and the directories its server writes into are made.
        """
        env = self._env(instance, self._role_env(role, extra_env))
        files = tuple((f.copy, f.data) for f in role.serve.files) if role is not None else ()
        dirs = spec_of(role.runtime).work_dirs(role) if role is not None else ()
        return Launch(argv=argv, env=env, cwd=self._root + instance, run_as=self.run_as,
                      digest=digest or self.digest(argv, instance, extra_env, role),
                      files=files, dirs=dirs)

    def _env(self, instance: str, extra_env: tuple[tuple[str, str], ...]
             ) -> tuple[tuple[str, str], ...]:
        env = (*self._env_before, (MARKER_ENV, instance), *self._env_after)
        if not extra_env:
            return env
        merged = dict(env)
        merged.update(extra_env)
        merged[MARKER_ENV] = instance
        return tuple(sorted(merged.items()))


def _with_role_env(role: RoleSpec | None, extra_env: tuple[tuple[str, str], ...]
                   ) -> tuple[tuple[str, str], ...]:
    """A role's ``spec.env`` (never the marker), then the assignment's variables, which win."""
    if role is None or not role.env:
        return extra_env
    return (*((k, v) for k, v in role.env if k != MARKER_ENV), *extra_env)


def _pair(key: str, value: str) -> str:
    return f"[{_json_string(key)}, {_json_string(value)}]"


def canonical(argv: Sequence[str], env: Sequence[tuple[str, str]], cwd: str,
              run_as: tuple[int, int] | None) -> str:
    """The text the launch digest hashes.

    Exactly ``json.dumps({"argv": argv, "env": env, "cwd": cwd, "run_as": run_as},
    sort_keys=True)`` (a changed digest would restart every server after an
    upgrade), written out by hand: the planner digests every managed role on
    every pass, and the general encoder was most of that cost.
    """
    env_text = ", ".join(_pair(k, v) for k, v in env)
    uid_gid = f"[{int(run_as[0])}, {int(run_as[1])}]" if run_as is not None else "null"
    return (f'{{"argv": [{", ".join(map(_json_string, argv))}], "cwd": {_json_string(cwd)}, '
            f'"env": [{env_text}], "run_as": {uid_gid}}}')


@functools.lru_cache(maxsize=4096)
def argv_changes(old: tuple[str, ...], new: tuple[str, ...]) -> str:
    """A short description of what changed between two launches' argv.

    ``ctx 4096 → 8192`` style, flag by flag; falls back to "launch changed".
    Kept for the pairs seen lately: a role whose restart waits (on memory, a
    fetch) is worded again on every pass.
    """
    def flags(argv: tuple[str, ...]) -> dict[str, str]:
        out: dict[str, str] = {"program": argv[0] if argv else ""}
        i = 1
        while i < len(argv):
            tok = argv[i]
            if tok.startswith("-") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[tok] = argv[i + 1]
                i += 2
            else:
                out[tok] = ""
                i += 1
        return out

    a, b = flags(old), flags(new)
    parts = []
    for key in sorted(set(a) | set(b), key=lambda k: (k != "program", k)):
        if a.get(key) != b.get(key):
            label = _FLAG_LABELS.get(key, key.lstrip("-"))
            parts.append(f"{label} {a.get(key, '(none)') or 'on'} → {b.get(key, '(none)') or 'on'}")
    parts = list(dict.fromkeys(parts))  # --cache-type-k and -v share one label
    return ", ".join(parts) if parts else "launch environment changed"


_FLAG_LABELS = {
    "--ctx-size": "ctx",
    "--model": "model",
    "--port": "port",
    "--host": "host",
    "--cache-type-k": "kv_quant",
    "--cache-type-v": "kv_quant",
    "--model-draft": "draft_model",
    "--mmproj": "mmproj",
    "--lora-scaled": "loras",
    "--alias": "alias",
}
