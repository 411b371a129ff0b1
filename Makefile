# Every target sets itself up: on a fresh machine `make demo` alone runs the
# demo and `make test` alone runs the tests.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export RECONCILER_TESTBED ?= /opt/reconciler-testbed

.PHONY: test test-quick demo demo-stop bench benchtools testbed tools clean venv mutants

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

# Real servers for the end-to-end tests and the demo (llama.cpp's llama-server compiled from source,
# mlx-lm on MLX's CPU backend), built once per machine outside the checkout.
testbed:
	bash testbed/setup.sh
	bash testbed/setup_mlx.sh
	bash testbed/demo_server.sh --prebuilt

# The checkers of deploy/: promtool (Debian's prometheus package) and systemd-analyze; node for
# the status page's script (tests/statuspage).
tools:
	@command -v promtool >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }
	@command -v systemd-analyze >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd; }
	@command -v node >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs; }

# Two workers: every test with real servers (e2e, mlx) on one, in file order (tests/conftest.py
# groups them), the pure tests on the other: the server tests mostly wait.
test: $(STAMP) testbed tools
	$(BIN)/python -m pytest -n 2 --dist loadgroup

# The pure and fast part only: no real servers.
test-quick: $(STAMP) tools
	$(BIN)/python -m pytest -m "not e2e and not mlx"

# The demo needs no compiler: a llama-server found ($$LLAMA_SERVER, the testbed's build,
# PATH) or a prebuilt one installed in seconds (testbed/demo_server.sh says which).
demo: $(STAMP)
	bash testbed/setup.sh --model-only
	DEMO_LLAMA_SERVER="$$(bash testbed/demo_server.sh)" $(BIN)/python demo/demo.py

demo-stop: $(STAMP)
	$(BIN)/python demo/demo.py --stop

# The fetch benchmarks' loopback mirror (nginx) and what they are measured against (curl, unzip).
benchtools:
	@for t in nginx curl unzip; do \
		command -v $$t >/dev/null 2>&1 || [ -x /usr/sbin/$$t ] || need="$$need $$t"; \
	done; [ -z "$$need" ] || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$need; }

bench: $(STAMP) testbed benchtools
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# Mutation testing of the pure core (tests/mutation/catalogue.py): slow, not part of `make test`.
mutants: $(STAMP)
	$(BIN)/python tools/mutants.py
