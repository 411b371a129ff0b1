"""Mutants of `reconcile import llama-swap`'s fidelity (§1.7, issue 31): a config read as
llama-swap reads it (Windows command splitting, YAML 1.2 scalars, Go's macro text), values the
flag table refuses, the one-port pattern, and a tally that counts only what validates."""

from __future__ import annotations

from tests.mutation.mutant import mutant

_T = ("tests/manifests/test_import_swap_faithful.py",)

MUTANTS = (
    mutant("manifests/llamaswap.py", "windows-split-posix",
           "unwrap_shell(split_cmd(d[\"argv\"], windows=windows), d[\"notes\"])",
           "unwrap_shell(split_cmd(d[\"argv\"], windows=False), d[\"notes\"])",
           "§1.7: C:\\llama\\llama-server.exe loses its backslashes: 'C:llamallama-server' is "
           "not a server, nothing of a Windows config imported", *_T),
    mutant("manifests/swapsyntax.py", "windows-backslash-quote",
           "                if (j - i) % 2:\n",
           "                if not (j - i) % 2:\n",
           "§1.7: a Windows `\\\"` ends a quoted word instead of being a quote", *_T),
    mutant("manifests/swapsyntax.py", "windows-not-detected",
           "    return any(_WINDOWS.search(text) for text in commands)",
           "    return False",
           "§1.7: a Windows config split the POSIX way, backslashes lost", *_T),
    mutant("manifests/swapsyntax.py", "yaml-1-1-booleans",
           "    return yaml.load(text, Loader=ConfigLoader)",
           "    return yaml.safe_load(text)",
           "§1.7: a macro `fa: on` becomes True and is written `-fa True`", *_T),
    mutant("manifests/swapsyntax.py", "go-bool-text",
           "        return \"true\" if value else \"false\"",
           "        return str(value)",
           "§1.7: a macro `b: true` is written `True`, not as llama-swap writes it", *_T),
    mutant("manifests/translate.py", "refused-value-written",
           "            if value is not None and self.refused(flag, spelling, [value]):\n"
           "                return\n",
           "",
           "§1.7: --n-gpu-layers 100,100 written to extra_args and counted whole", *_T),
    mutant("manifests/importdocs.py", "one-port-kept",
           "        if port not in seen and port not in set(reserved):",
           "        if True:",
           "§1.7: every model keeps the one shared --port: the imported set is invalid", *_T),
    mutant("manifests/importdocs.py", "one-port-unsaid",
           "        out.append(attrs.evolve(role, translation=tr, notes=(*role.notes, note)))",
           "        out.append(attrs.evolve(role, translation=tr))",
           "§1.7: a role's port changes without a word", *_T),
    mutant("commands/importer.py", "tally-ignores-validation",
           "            and not any(not n.kept for n in d.notes) and f\"{d.name}.yaml\" not in "
           "invalid}",
           "            and not any(not n.kept for n in d.notes)}",
           "§1.7: a line whose written file does not validate is counted whole", *_T),
    mutant("commands/importer.py", "tally-blames-missing-models",
           "    real = [p for p in problems if not any(w in p.message for w in waiting)]",
           "    real = list(problems)",
           "§1.7: a Model still to finish makes its whole line 'not whole'", *_T),
    mutant("manifests/llamaswap.py", "ports-in-file-order",
           "    for model_id in sorted(bodies, key=lambda m: str(m).encode()):",
           "    for model_id in bodies:",
           "§1.7: ${PORT} handed out in the file's order: roles get other ports than "
           "llama-swap gave them", *_T),
    mutant("manifests/llamaswap.py", "concurrency-not-carried",
           "                           max_concurrency=limit if limit > 0 else None))",
           "                           max_concurrency=None))",
           "§1.7: concurrencyLimit said carried but no max_concurrency written", *_T),
    mutant("manifests/llamaswap.py", "ignored-key-fails-line",
           "        return Note(flag=key, kept=True, dropped=True, what=\"llama-swap does not "
           "read it either\")",
           "        return Note(flag=key, kept=False, what=\"llama-swap does not read it "
           "either\")",
           "§1.7: a key llama-swap itself ignores costs the line its 'whole'", *_T),
    mutant("manifests/llamaswap.py", "env-not-expanded",
           "        macros = {**env_macros, **macros}\n",
           "",
           "§1.7: ${env.X} left as written: the printed `models add ${env.HOME}/…` fails", *_T),
    mutant("manifests/llamaswap.py", "param-ids-not-aliases",
           "        aliases = (*aliases, *_param_aliases(body.get(\"filters\"), str(model_id), "
           "notes))",
           "        _param_aliases(body.get(\"filters\"), str(model_id), notes)",
           "§1.7: clients asking for gemma:thinking get 404", *_T),
    mutant("manifests/swapsyntax.py", "shell-script-not-unwrapped",
           "    servers = [p for p in parts if _names_server(p)]",
           "    servers = []",
           "§1.7: bash -c \"… exec llama-server …\" is 'bash' is not a server", *_T),
    mutant("manifests/swapsyntax.py", "shell-script-rest-unsaid",
           "        if part is not servers[0]:",
           "        if False:",
           "§1.7: a script's `cd /models` dropped silently (relative paths change meaning)",
           *_T),
    mutant("commands/importer.py", "excludes-unimported",
           "    drafts = [attrs.evolve(d, excludes=tuple(e for e in d.excludes if e in imported))",
           "    drafts = [attrs.evolve(d, excludes=tuple(e for e in d.excludes))",
           "§1.7: excludes name a role never written: the imported set does not validate",
           *_T),
    mutant("commands/importer.py", "other-build-unsaid",
           "    if not os.path.isabs(program) or os.path.realpath(program) == chosen:",
           "    if True:",
           "§1.7: a model that ran another llama-server build silently runs the node's", *_T),
)
