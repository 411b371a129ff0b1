"""Mutants of the router's Anthropic and Responses routes (BEHAVIOUR §9), each killed by a test
that names its rule."""

from __future__ import annotations

from tests.mutation.mutant import mutant

MUTANTS = (
    mutant("router/proxy.py", "anthropic-errors-openai-shaped",
           "if isinstance(answer, _Refusal) and rules.PATHS.get(request.path) is rules.Api.ANTHROPIC:",
           "if isinstance(answer, _Refusal) and False:",
           "§9: an Anthropic client gets OpenAI-shaped errors (its SDK cannot tell a 404 from "
           "a 500)", "tests/router/test_apis.py"),
    mutant("router/apis.py", "anthropic-404-type", '404: "not_found_error"',
           '404: "invalid_request_error"',
           "§9: an unknown model on /v1/messages is not Anthropic's not_found_error",
           "tests/router/test_apis.py", "tests/router/test_rules.py"),
    mutant("router/apis.py", "x-api-key-not-read",
           '        token = (headers.get("X-Api-Key") or "").strip() or None',
           "        token = None",
           "§9: an Anthropic client with the right key (X-Api-Key) gets 401",
           "tests/router/test_apis.py", "tests/router/test_rules.py"),
    mutant("router/apis.py", "two-different-keys-taken",
           'if token is not None and token != seen["x-api-key"].strip():', "if False:",
           "§9: a bearer key and an X-Api-Key that differ: one is silently picked",
           "tests/router/test_apis.py", "tests/router/test_rules.py"),
    mutant("router/rules.py", "messages-not-routed", '    "/v1/messages": Api.ANTHROPIC,\n',
           "", "§9: POST /v1/messages is 404: Claude Code and the anthropic client cannot "
           "reach a role", "tests/router/test_apis.py"),
    mutant("router/rules.py", "responses-not-routed", '    "/v1/responses": Api.OPENAI,\n',
           "", "§9: POST /v1/responses is 404", "tests/router/test_apis.py"),
    mutant("router/rules.py", "anthropic-finds-ollama-only",
           "ollama = api is Api.OLLAMA", "ollama = api is not Api.OPENAI",
           "§9: /v1/messages finds no llama.cpp role (404 for every model)",
           "tests/router/test_apis.py", "tests/router/test_rules.py"),
    mutant("router/rules.py", "anthropic-streams-by-default",
           "return flag is True if api is not Api.OLLAMA else flag is not False",
           "return flag is True if api is Api.OPENAI else flag is not False",
           "§9: an Anthropic request without `stream` is taken for a stream",
           "tests/router/test_rules.py"),
    mutant("router/clients.py", "anthropic-cache-reads-uncounted",
           '"cache_read_input_tokens",', '"cache_read_input_tokenz",',
           "§9: Anthropic answers' prompt tokens leave out the cached ones (undercounted)",
           "tests/router/test_apis.py"),
    mutant("router/dispatch.py", "stream-head-not-read-for-usage",
           'seen = b"".join(tail) if tail and tail[0] is head else head + b"".join(tail)',
           'seen = b"".join(tail)',
           "§9: an Anthropic stream's input tokens (in message_start) are never counted",
           "tests/router/test_apis.py"),
    mutant("router/dispatch.py", "place-queue-unbounded",
           "if not queued and not rules.admits(self.book.waiting(role),",
           "if False and not rules.admits(self.book.waiting(role),",
           "§9: requests queued for a place under max_concurrency pile up past max_queue "
           "(no 429), each holding a connection until queue_timeout",
           "tests/router/test_apis.py"),
)
