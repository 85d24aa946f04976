# Every target installs what it needs; `make run` and `make test` work on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: install assets browser run serve test test-fast lint fmt schema bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

assets:
	bash scripts/install-assets.sh

browser:
	bash scripts/ensure-chromium.sh

run: install assets
	$(BIN)/turnwise demo

serve: install assets
	$(BIN)/turnwise serve

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy backend frontend_py tests bench

fmt: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

schema: install
	$(BIN)/turnwise export-schema --output schema.graphql

test: install assets browser lint
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

test-fast: install
	$(BIN)/python -m pytest -q -x -m "not browser" $(PYTEST_ARGS)

bench: install
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build test-results .pytest_cache .mypy_cache .ruff_cache
