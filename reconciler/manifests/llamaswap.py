"""A llama-swap ``config.yaml`` → one command line and role options per model (PURE).

llama-swap (github.com/mostlygeek/llama-swap) starts one server per model on demand and swaps
them; its configuration is the commonest way people describe several ``llama-server`` lines
today. ``reconcile import llama-swap`` reads it as llama-swap would — macros expanded
(``${name}``, model-level macros first, ``${PORT}`` from ``startPort``, ``${MODEL_ID}``),
``cmd`` split as a shell would split it, comment lines dropped — and maps what it means onto
ours:

* ``ttl`` → ``state: on-demand`` + ``idle_after`` (every llama-swap model starts on its
  first request; ``ttl: 0`` never stops it for idleness: ``idle_after`` is left at a day);
* which models may run together (``routing.router.settings`` groups or matrix, or the older
  top-level ``groups``) → ``excludes``, and what excludes cannot say → notes
  (``swaprouting.py``); with no groups, llama-swap runs one model at a time, so every model
  excludes every other;
* ``aliases`` (strings or ``{id: …}``) → ``spec.aliases``, the model id itself too when it is
  not a plain role name; ``env`` → ``spec.env``;
* ``concurrencyLimit`` → ``max_concurrency``; ``filters.setParamsByID`` names → aliases
  (their parameters said, not carried); ``useModelName``, ``cmdStop``, … done our own way,
  and a key llama-swap does not read ignored as it ignores it: none costs a line;
* the rest (other ``filters``, ``proxy`` to a non-loopback host, ``peers``, …) is a
  ``Note`` saying why it is not carried.

Macros that read the environment (``${env.HOME}``) are expanded from this machine's, as
llama-swap expands them from its own (said); one not set here is left as written, with a
note. ``${PORT}`` is handed out in sorted model-id order, as llama-swap does.

The YAML is read, and each ``cmd`` split, as llama-swap does it (``swapsyntax.py``): ``fa: on``
is the text ``on``; a config whose commands name Windows paths is split the Windows way.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import attrs

from reconciler.core.loopback import is_loopback_host
from reconciler.manifests import swaprouting
from reconciler.manifests.swapsyntax import (  # noqa: F401 - parse, split_cmd: for callers
    go_text, is_windows, parse, split_cmd, unwrap_shell)
from reconciler.manifests.translate import Note, role_name

frozen = attrs.frozen(kw_only=True)

DEFAULT_START_PORT = 5800  # llama-swap's default startPort
DEFAULT_LISTEN_PORT = 8080  # llama-swap's default --listen :8080
NEVER_IDLE = "24h"  # ttl 0: our idle_after has no "never"; a day of no requests
_MACRO = re.compile(r"\$\{([A-Za-z0-9_.-]+)\}")
#: Model keys we carry; the others get a note.
_CARRIED = {"cmd", "ttl", "aliases", "env", "proxy", "name", "description", "unlisted",
            "macros", "checkEndpoint", "metadata", "concurrencyLimit", "useModelName"}
#: Model keys llama-swap reads that the reconciler does its own way (kept, not written).
_OWN_WAY = {
    "cmdStop": "the reconciler stops the servers it starts itself",
    "sendLoadingState": "the router holds a request while its server starts, as llama-swap",
    "timeouts": "the router's own timeouts apply (§9)",
}
#: Model keys llama-swap reads at all (yaml.v3 skips any other key without a word).
_SWAP_KEYS = {*_CARRIED, *_OWN_WAY, "filters"}
_TOP_IGNORED = {"healthCheckTimeout", "logLevel", "logTimeFormat", "logToStdout",
                "metricsMaxInMemory", "captureBuffer", "sendLoadingState", "includeAliasesInList"}


@frozen
class SwapModel:
    """One model of the config, as a command line and the options of its role."""

    model_id: str
    role: str
    argv: tuple[str, ...]
    port: int | None
    idle_after: str
    aliases: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    excludes: tuple[str, ...]
    notes: tuple[Note, ...]
    max_concurrency: int | None = None  # concurrencyLimit


@frozen
class SwapConfig:
    models: tuple[SwapModel, ...]
    router_port: int
    notes: tuple[Note, ...]  # about the config as a whole


def read(config: Mapping[str, Any], *, listen_port: int = DEFAULT_LISTEN_PORT,
         environ: Mapping[str, str] | None = None) -> SwapConfig:
    """Every model of a parsed llama-swap config; ValueError when it is not one.

    ``environ``: the environment llama-swap would read ``${env.X}`` from (the importing
    machine's, given by the shell); a variable it lacks is left as written, with a note."""
    env_macros = {f"env.{k}": v for k, v in (environ or {}).items()}
    models = config.get("models")
    if not isinstance(models, Mapping) or not models:
        raise ValueError("not a llama-swap config: no `models` mapping")
    top_notes = _top_notes(config)
    start_port = _int(config.get("startPort"), DEFAULT_START_PORT)
    global_ttl = _int(config.get("globalTTL"), 0)
    global_macros = _macros(config.get("macros"))
    roles = _unique_roles(list(models))
    bodies = {m: (b if isinstance(b, Mapping) else {}) for m, b in models.items()}
    macros_of = {m: {**global_macros, **_macros(b.get("macros")), "MODEL_ID": str(m)}
                 for m, b in bodies.items()}
    # ${PORT} may sit inside another macro: expand the others first, then count it — in
    # sorted model-id order, as llama-swap hands out ports (not in the file's order).
    texts = {m: [_expand(str(b.get(k) or ""), macros_of[m], []) for k in ("cmd", "proxy")]
             for m, b in bodies.items()}
    ports: dict[Any, int] = {}
    for model_id in sorted(bodies, key=lambda m: str(m).encode()):
        if any("${PORT}" in text for text in texts[model_id]):
            ports[model_id] = start_port + len(ports)
    drafts = []
    for model_id, body in bodies.items():
        notes: list[Note] = []
        macros = macros_of[model_id]
        port = ports.get(model_id)
        if port is not None:
            macros["PORT"] = str(port)
        for name in sorted({n for t in texts[model_id] for n in _MACRO.findall(t)}
                           & set(env_macros)):
            notes.append(Note(flag=f"${{{name}}}", kept=True, changed=True, what=(
                "expanded from this machine's environment, as llama-swap expands it")))
        macros = {**env_macros, **macros}
        cmd_text, proxy = (_expand(text, macros, notes) for text in texts[model_id])
        proxy_port = _proxy_port(proxy, notes)
        port = port if port is not None else proxy_port
        ttl = _int(body.get("ttl"), global_ttl)
        aliases = _aliases(body.get("aliases"))
        if str(model_id) != roles[model_id]:
            aliases = (str(model_id), *aliases)
        for key in sorted(set(body) - _CARRIED):
            notes.append(_key_note(str(key), body[key]))
        limit = _int(body.get("concurrencyLimit"), 0)
        if limit > 0:
            notes.append(Note(flag="concurrencyLimit", kept=True, changed=True, what=(
                f"spec.max_concurrency: {limit}; requests over it wait in the router's queue "
                "(llama-swap answered 429)")))
        if body.get("useModelName"):
            notes.append(Note(flag="useModelName", kept=True, dropped=True, what=(
                "the router already sends each server the model name it serves")))
        aliases = (*aliases, *_param_aliases(body.get("filters"), str(model_id), macros,
                                             notes))
        drafts.append(dict(model_id=str(model_id), role=roles[model_id], argv=cmd_text,
                           port=port, idle_after=f"{ttl}s" if ttl > 0 else NEVER_IDLE,
                           aliases=aliases, env=_env(body.get("env"), notes), notes=notes,
                           max_concurrency=limit if limit > 0 else None))
    windows = is_windows([d["argv"] for d in drafts])
    for d in drafts:
        try:
            d["argv"] = unwrap_shell(split_cmd(d["argv"], windows=windows), d["notes"])
        except ValueError as e:  # llama-swap cannot start it either: this model only
            d["argv"] = ()
            d["notes"].append(Note(flag="cmd", kept=False, what=f"cannot be split ({e})"))
        if windows and d["argv"]:
            d["notes"].append(Note(flag=d["argv"][0], kept=True, changed=True, what=(
                "a Windows program (llama-swap ran on Windows; its command split the Windows "
                "way): not on this machine, the node's serve_programs name this machine's; "
                "the flags and the model are carried")))
    routing = swaprouting.read(config, [d["model_id"] for d in drafts],
                               {str(k): v for k, v in roles.items()})
    top_notes += routing.config_notes
    out = tuple(SwapModel(**{**d, "notes": (*d["notes"], *routing.notes.get(d["model_id"], ()))},
                          excludes=routing.excludes[d["model_id"]])
                for d in drafts)
    return SwapConfig(models=out, router_port=listen_port, notes=tuple(top_notes))


def _expand(text: str, macros: Mapping[str, str], notes: list[Note]) -> str:
    for _ in range(8):  # macros may name macros; llama-swap refuses deeper nesting too
        changed = _MACRO.sub(lambda m: macros.get(m.group(1), m.group(0)), text)
        if changed == text:
            break
        text = changed
    for name in sorted(set(_MACRO.findall(text))):
        what = ("not set in this machine's environment (llama-swap reads it from its own): "
                "left as written" if name.startswith("env.") else "no such macro: left as written")
        notes.append(Note(flag=f"${{{name}}}", kept=False, what=what))
    return text


def _key_note(key: str, value: Any) -> Note:
    """What becomes of a model key we do not carry: done our own way, not carried, or — a key
    llama-swap itself does not read — nothing (it ignored it too)."""
    if key in _OWN_WAY:
        return Note(flag=key, kept=True, dropped=True, what=_OWN_WAY[key])
    if key not in _SWAP_KEYS:
        return Note(flag=key, kept=True, dropped=True, what="llama-swap does not read it either")
    if key == "filters" and isinstance(value, Mapping) and set(value) <= {"setParamsByID"}:
        return Note(flag=key, kept=True, dropped=True, what="its setParamsByID names are aliases")
    return Note(flag=key, kept=False, what=f"llama-swap's `{key}` has no counterpart here "
                "(the router forwards requests unchanged)")


def _param_aliases(filters: Any, model_id: str, macros: Mapping[str, str],
                   notes: list[Note]) -> tuple[str, ...]:
    """``filters.setParamsByID`` names (macros expanded: ``${MODEL_ID}:high``): llama-swap
    serves each as an alias of the model (with the parameters it sets, which are not
    carried: said)."""
    by_id = filters.get("setParamsByID") if isinstance(filters, Mapping) else None
    if not isinstance(by_id, Mapping):
        return ()
    names = [_expand(str(k), macros, notes) for k in by_id]
    for name in names:
        notes.append(Note(flag=f"setParamsByID.{name}", kept=False, what=(
            ("an alias here; " if name != model_id else "") + "the parameters llama-swap set "
            "on its requests are not carried: clients naming it get the server's defaults")))
    return tuple(name for name in names if name != model_id)


def _macros(raw: Any) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): go_text(v).strip() for k, v in raw.items()}


def _aliases(raw: Any) -> tuple[str, ...]:
    out = []
    for item in raw or ():
        if isinstance(item, Mapping) and item.get("id"):
            out.append(str(item["id"]))
        elif isinstance(item, (str, int, float)):
            out.append(str(item))
    return tuple(out)


def _env(raw: Any, notes: list[Note]) -> tuple[tuple[str, str], ...]:
    out = []
    for item in raw or ():
        name, eq, value = str(item).partition("=")
        if eq:
            out.append((name, value))
        else:
            notes.append(Note(flag=str(item), kept=False, what="an env entry without NAME=VALUE"))
    return tuple(out)


def _proxy_port(proxy: str, notes: list[Note]) -> int | None:
    if not proxy:
        return None
    m = re.fullmatch(r"https?://(\[[^\]]+\]|[^/:]+)(?::(\d+))?/?", proxy)
    if m is None:
        notes.append(Note(flag="proxy", kept=False, what=f"{proxy!r} is not http://HOST:PORT"))
        return None
    host = m.group(1).strip("[]")
    if not is_loopback_host(host):  # the one loopback rule (§5): 127/8, ::1, localhost
        notes.append(Note(flag="proxy", kept=False, what=f"{host} is not this machine: the "
                          "reconciler connects to loopback servers only"))
    return int(m.group(2)) if m.group(2) else None


def _top_notes(config: Mapping[str, Any]) -> list[Note]:
    notes = []
    for key in sorted(config):
        if key in ("models", "groups", "matrix", "routing", "macros", "startPort", "globalTTL") \
                or key in _TOP_IGNORED:
            continue
        what = {"apiKeys": "keys never go in git: put NAME:SHA256 lines in the router's "
                           "api_keys_file on the node",
                "hooks": "startup preloads are not carried: a role that must always run is "
                         "`state: running`",
                "peers": "remote peers are not carried: the router forwards to this machine only"}.get(
            key, f"llama-swap's `{key}` has no counterpart here")
        notes.append(Note(flag=key, kept=False, what=what))
    return notes


def _unique_roles(ids: list[Any]) -> dict[Any, str]:
    out: dict[Any, str] = {}
    taken: set[str] = set()
    for model_id in ids:
        name = base = role_name(str(model_id))
        n = 2
        while name in taken:
            name = f"{base[:60]}-{n}"
            n += 1
        taken.add(name)
        out[model_id] = name
    return out


def _int(raw: Any, default: int) -> int:
    try:
        return int(raw) if raw is not None else default
    except (TypeError, ValueError):
        return default
