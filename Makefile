# Every target installs what it needs; `make run` and `make test` work on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# requirements-run.lock: what running needs (runtime + redis extra), for `make run` / `serve`;
# requirements.lock: that and the dev tooling, for every other target. Same versions in both.
RUN_LOCK := requirements-run.lock
LOCK := requirements.lock
RUN_STAMP := $(VENV)/.installed-run-$(shell cat pyproject.toml $(wildcard $(RUN_LOCK)) | sha1sum | cut -c1-12)
STAMP := $(VENV)/.installed-dev-$(shell cat pyproject.toml $(wildcard $(LOCK)) | sha1sum | cut -c1-12)
UV := uv==0.13.8
# The 1.x MCP client the MCP task tests drive the 2025-11-25 tasks API with (tests/mcp_client_v1): a venv
# of its own, as the service runs the 2.x SDK.
MCP1 := tests/mcp_client_v1/.venv
MCP1_LOCK := tests/mcp_client_v1/requirements.lock
MCP1_STAMP := $(MCP1)/.installed-$(shell cat $(wildcard $(MCP1_LOCK)) | sha1sum | cut -c1-12)
PYTEST_ARGS ?=
# Test processes (pytest-xdist): each has its own databases, servers and browser, and a test file
# runs whole in one of them. 1 runs the suite in this process alone.
PYTEST_WORKERS ?= 2
XDIST = $(if $(filter 1,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)
# Run a second time by `make test` with the database fast path off (TURNWISE_DB_FAST_PATH=0: every
# statement through plain SQLAlchemy), so both paths stay equivalent: every statement's own tests
# (repository), every lifecycle path through the services (lifecycle), recovery and resume (resume),
# the API over real servers (api) and every way the database fails (dbfaults). The rest (the browser,
# the kit, reach, the bus) runs once, on the fast path, and so does the official MCP conformance
# suite, which checks the protocol's wire (a process per scenario): the one write it makes is an ask,
# which the other API tests run both ways.
DB_SUITES := tests/repository tests/lifecycle tests/resume tests/api tests/dbfaults \
	--ignore=tests/api/test_mcp_conformance.py

.PHONY: install install-run lock assets test-assets mcp-client-v1 browser pgbouncer run serve test test-fast lint fmt schema bench scenarios clean

# Exact versions come from the hashed locks; the project itself adds none. `pip check` fails when
# pyproject.toml names a dependency the lock lacks: run `make lock`. The full lock holds the run
# lock's every version, so a full install stands for a run install too.
$(RUN_STAMP): pyproject.toml $(RUN_LOCK)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --require-hashes -r $(RUN_LOCK)
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -e .
	$(BIN)/pip check
	rm -f $(VENV)/.installed-run-* && touch $@

$(STAMP): pyproject.toml $(LOCK) $(RUN_LOCK)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --require-hashes -r $(LOCK)
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -e .
	$(BIN)/pip check
	rm -f $(VENV)/.installed-* && touch $@ $(RUN_STAMP)

install-run: $(RUN_STAMP)

install: $(STAMP)

# Regenerate the locks after changing dependencies in pyproject.toml (then `make install`).
# The run lock and requirements-bench.lock (the `bench` extra, LangGraph for `bench cycle`, installed
# by `make bench` alone) are compiled against the main lock, so they keep every version it has.
lock:
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	test -x $(BIN)/uv || $(BIN)/pip install -q --disable-pip-version-check '$(UV)'
	$(BIN)/uv pip compile pyproject.toml --extra dev --extra redis --universal --python-version 3.11 \
		--generate-hashes --custom-compile-command 'make lock' --quiet -o $(LOCK)
	$(BIN)/uv pip compile pyproject.toml --extra redis -c $(LOCK) --universal --python-version 3.11 \
		--generate-hashes --custom-compile-command 'make lock' --quiet -o $(RUN_LOCK)
	$(BIN)/uv pip compile pyproject.toml --extra bench -c $(LOCK) --universal --python-version 3.11 \
		--generate-hashes --custom-compile-command 'make lock' --quiet -o requirements-bench.lock
	$(BIN)/uv pip compile tests/mcp_client_v1/requirements.in --universal --python-version 3.11 \
		--generate-hashes --custom-compile-command 'make lock' --quiet -o $(MCP1_LOCK)

# What the web app serves (frontend_py/web/vendor/); test-assets adds the browser tests' and the
# GraphQL-over-HTTP audit's npm packages and the MCP conformance suite.
assets:
	bash scripts/install-assets.sh

test-assets:
	bash scripts/install-assets.sh --tests

$(MCP1_STAMP): $(MCP1_LOCK)
	test -x $(MCP1)/bin/python || $(PY) -m venv $(MCP1)
	$(MCP1)/bin/pip install -q --disable-pip-version-check --require-hashes -r $(MCP1_LOCK)
	$(MCP1)/bin/pip check
	rm -f $(MCP1)/.installed-* && touch $@

mcp-client-v1: $(MCP1_STAMP)

browser:
	bash scripts/ensure-apt.sh /usr/bin/chromium chromium

# PgBouncer for the database-fault tests (tests/dbfaults), started by the tests themselves.
pgbouncer:
	bash scripts/ensure-apt.sh /usr/sbin/pgbouncer pgbouncer

run: install-run assets
	$(BIN)/turnwise demo

serve: install-run assets
	$(BIN)/turnwise serve

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy backend frontend_py tests bench

fmt: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

schema: install-run
	$(BIN)/turnwise export-schema --output schema.graphql

test: install test-assets mcp-client-v1 browser pgbouncer lint
	$(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST) $(PYTEST_ARGS)
	TURNWISE_DB_FAST_PATH=0 $(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST) $(DB_SUITES) $(PYTEST_ARGS)

test-fast: install mcp-client-v1
	$(BIN)/python -m pytest -q -x -m "not browser" $(PYTEST_ARGS)

# Scenario -> tests matrix from the `scenario` markers; fails while a scenario has no test.
scenarios: install
	$(BIN)/python scripts/scenarios.py

# The benches need the `bench` extra besides the main lock (`bench cycle` runs LangGraph beside the floor).
bench: install
	$(BIN)/pip install -q --disable-pip-version-check --require-hashes -r requirements-bench.lock
	$(BIN)/pip check
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(MCP1) build test-results .pytest_cache .mypy_cache .ruff_cache
