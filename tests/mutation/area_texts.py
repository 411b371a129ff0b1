"""Mutants of the manifest texts, the import and the rules found unpinned nearby (issue 27).

Each breaks one rule an independent sample of mutants found unpinned, or one a
defect found from outside showed missing: the loopback mirror that validation
and the fetch must judge alike, control characters in printed text (§1.5),
the import's translation of a command line (§1.7), the flags a role may never
pass (§1.4), the orphan proof's directory (§4), the status page's followed log
(§11), and a process started as another instance (§3/§4).
"""

from __future__ import annotations

from tests.mutation.mutant import mutant

_FLAGS = ("tests/manifests",)
#: translate._is_next_flag: only a number may start with "-" and still be a value.
_NEXT_FLAG = ("return word.startswith(\"-\") and word not in flag.choices"
              " and not flag_tables.is_number(word)")
_IMPORT = ("tests/manifests/test_import.py", "tests/manifests/test_import_corpus.py",
           "tests/manifests")

MUTANTS = (
    # ------------------------------------------------------------ defects found from outside
    mutant("manifests/documents.py", "texts-mirror-not-asked",
           "    if not loopback.is_loopback(authority):\n        r.add(path, f\"plain http://",
           "    if False:\n        r.add(path, f\"plain http://",
           "§1.6/§5: http://127.0.0.999 validates, and every fetch then refuses it",
           "tests/manifests/test_model_sources.py", "tests/manifests"),
    mutant("core/errors.py", "texts-shown-raw",
           "    return _CONTROL.sub(lambda m: m[0].encode(\"unicode_escape\")"
           ".decode(\"ascii\"), text)",
           "    return text",
           "§1.5: fleet --diff, plan and status print an ESC sequence raw (the screen clears)",
           "tests/fleet/test_commands.py", "tests/statuspage/test_status_cmd.py", "tests/fleet"),
    mutant("core/errors.py", "texts-json-c1-raw",
           '    return _RAW_IN_JSON.sub(lambda m: f"\\\\u{ord(m[0]):04x}", text)',
           "    return text",
           "§1.5: fleet --json prints a C1 CSI raw inside a JSON string",
           "tests/fleet/test_commands.py", "tests/fleet"),
    mutant("manifests/roleextras.py", "texts-env-controls",
           "    if CONTROL.search(value):\n        return (f\"the value of {name}",
           "    if \"\\x00\" in value or \"\\n\" in value:\n        return (f\"the value of {name}",
           "§1.5: an env value holding ESC [2J validates, and fleet --diff prints it",
           "tests/manifests/test_golden.py", "tests/fleet/test_commands.py", "tests/manifests"),
    mutant("manifests/roleextras.py", "texts-alias-c1",
           'CONTROL = re.compile(r"[\\x00-\\x1f\\x7f-\\x9f]")',
           'CONTROL = re.compile(r"[\\x00-\\x1f\\x7f]")',
           "§1.5/§9: an alias or env value holding a C1 CSI (\\u009b) validates",
           "tests/manifests/test_golden.py", "tests/manifests"),
    mutant("manifests/roleextras.py", "texts-alias-blank-reason",
           "    if not text.strip():\n",
           "    if not text:\n",
           "§9: a blank alias ('  ') is refused for control characters, not as blank",
           "tests/manifests/test_golden.py", "tests/manifests"),
    # ------------------------------------------------------------ §1.7 import
    mutant("manifests/translate.py", "texts-import-negative-value",
           _NEXT_FLAG, "return word.startswith(\"-\") and word not in flag.choices",
           "§1.7: `--seed -1` loses its value on import (a number may start with -)",
           *_IMPORT),
    mutant("manifests/translate.py", "texts-import-dash-value",
           _NEXT_FLAG, _NEXT_FLAG.replace('startswith("-")', 'startswith("--")'),
           "§1.7: `-fa -ngl 99` imports -ngl as -fa's value (only a number may start with -)",
           *_IMPORT),
    mutant("manifests/translate.py", "texts-import-lora-scale",
           "self.models.append(ModelNeed(weight=weight, path=path, scale=scale))",
           "self.models.append(ModelNeed(weight=weight, path=path, scale=None))",
           "§1.7: `--lora-scaled A:0.5` imports as scale 1.0",
           *_IMPORT),
    mutant("manifests/translate.py", "texts-import-port-overrides",
           'if "port" not in state.serve and port is not None:',
           "if port is not None:",
           "§1.7: llama-swap's ${PORT} replaces a --port the cmd gives itself",
           *_IMPORT),
    mutant("manifests/translate.py", "texts-import-hub-any-runtime",
           "elif self.command.hub_models and _HUB_ID.fullmatch(value):",
           "elif _HUB_ID.fullmatch(value):",
           "§1.7: llama-server's `--model models/q.gguf` imports as a Hub repository",
           *_IMPORT),
    # ------------------------------------------------------------ elsewhere
    mutant("core/loopback.py", "texts-localhost-suffix",
           "    if host == LOCALHOST:\n        return True",
           "    if host.endswith(LOCALHOST):\n        return True",
           "§5: the name notlocalhost counts as loopback",
           "tests/safety/test_loopback.py", "tests/safety", "tests/manifests"),
    mutant("core/ownership.py", "texts-orphan-below-instance",
           'return instance if instance and "/" not in instance else None',
           "return instance if instance else None",
           "§4: a process working below <data_root>/<id> (in <id>/sub) proves itself ours",
           "tests/safety/test_ownership.py", "tests/safety", "tests/loop"),
    mutant("report/templates/page.js", "texts-followed-log-html",
           'logLines.appendChild(document.createTextNode(e.data + "\\n"));',
           'logLines.insertAdjacentHTML("beforeend", e.data + "\\n");',
           "§11: a followed server log line holding <img onerror=…> runs as HTML on the page",
           "tests/statuspage/test_page.py", "tests/statuspage"),
    mutant("runtimes/flags.py", "texts-value-4kib-refused",
           "if len(value) > MAX_VALUE_CHARS:",
           "if len(value) >= MAX_VALUE_CHARS:",
           "§1.4: an extra_args value of exactly 4 KiB is refused",
           *_FLAGS),
    mutant("manifests/roleextras.py", "texts-env-4kib-refused",
           "    if len(value) > MAX_VALUE_CHARS:",
           "    if len(value) >= MAX_VALUE_CHARS:",
           "§1.4: an env value of exactly 4 KiB is refused",
           *_FLAGS),
    mutant("runtimes/llamacpp_flags.py", "texts-reuse-port-allowed",
           'flag("--reuse-port", cls=EXPECTS,\n'
           '         instead="would let another process answer on the role\'s port"),',
           'flag("--reuse-port"),',
           "§1.4/§2: extra_args --reuse-port lets another process answer on the role's port",
           *_FLAGS),
    mutant("runtimes/llamacpp_flags.py", "texts-hf-token-allowed",
           'flag("-hft --hf-token", T, NETWORK, "the server never downloads: the node fetches '
           'Models "\n         "and reads the Hub token from NodeConfig fetch.hf_token_file"),',
           'flag("-hft --hf-token", T),',
           "§1.4/§1.6: extra_args --hf-token puts a Hub token in git and on the command line",
           *_FLAGS),
    mutant("runtimes/llamacpp_flags.py", "texts-tools-allowed",
           'flag("--tools", L, EXPECTS, "built-in tools run shell commands and write files on '
           'the node"),',
           'flag("--tools", L),',
           "§1.4: extra_args --tools lets a client run shell commands on the node",
           *_FLAGS),
    mutant("planner/stages/ladder.py", "texts-another-instance-kept",
           "            or r.owner_id != r.instance_id):",
           "            ):",
           "§3/§4: a pid started as another instance than the role's current one is kept",
           "tests/plan/test_golden.py", "tests/plan"),
)
