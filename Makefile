# runs/ is never deleted by make: it holds the only copy of every trace.
# One command sets up and runs the offline benchmark (`make bench`); one passes the tests (`make test`).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BROWSER_PACKAGES := chromium chromium-driver libreoffice-impress-nogui poppler-utils

.PHONY: setup sandbox browser bun codex phoenix bench converse test quick lint clean

# The claude and cuga hosts' clients come too, so their columns run offline against the rehearsal model.
# cuga goes in without its own dependency list (torch, docling, browsers: several GB); requirements-cuga.txt
# holds the lean set its SDK path needs.
$(STAMP): pyproject.toml requirements-cuga.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,claude]' -r requirements-cuga.txt
	$(BIN)/python -m pip install -q --no-deps cuga==0.4.3
	@$(MAKE) --no-print-directory sandbox
	@$(MAKE) --no-print-directory browser
	@$(MAKE) --no-print-directory bun
	@$(MAKE) --no-print-directory codex
	touch $(STAMP)

# The agent's commands run in bubblewrap (docs/sandbox.md): installed here where this user may (root with
# apt-get); elsewhere the note says what to do.
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
		  { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; }; }; } || \
		echo "note: bubblewrap (bwrap) is not installed and could not be installed here: install it (Debian: apt-get install bubblewrap), or run with --palette-sandbox none"

# The site's tests open its pages in the system Chromium through playwright (tests/browser.py; no
# `playwright install`), and read decks and PDFs with LibreOffice and poppler: installed here where this user may
# (root with apt-get); elsewhere the note says what to do, and those tests are skipped.
browser:
	@[ -x /usr/bin/chromium ] || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ apt-get install -y -qq $(BROWSER_PACKAGES) >/dev/null 2>&1 || \
		  { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq $(BROWSER_PACKAGES) >/dev/null 2>&1; }; }; } || \
		echo "note: Chromium is not installed and could not be installed here: install it (Debian: apt-get install $(BROWSER_PACKAGES)), or the site's browser tests are skipped"

# A family's hidden checks written for `bun test` (docs/families.md) run under bun, from the npm registry (its
# package carries the binary): installed into the venv, beside this Python, where the graders look for it.
bun:
	@[ -x $(BIN)/bun ] || { command -v npm >/dev/null 2>&1 && \
		npm install -s --no-audit --no-fund --prefix $(VENV)/node bun@1 >/dev/null 2>&1 && \
		ln -sf ../node/node_modules/bun/bin/bun.exe $(BIN)/bun; } || \
		echo "note: bun could not be installed (npm install bun): a family's checks written for bun:test are an error until it is"

# The Codex CLI, pinned, from the npm registry (its platform package carries the binary, about 420 MB): the
# rehearsal server's Responses wire is tested against it (tests/test_responses_wire.py).
CODEX_VERSION := 0.171.0
codex:
	@[ -x $(BIN)/codex ] || { command -v npm >/dev/null 2>&1 && \
		npm install -s --no-audit --no-fund --save-exact --prefix $(VENV)/node @openai/codex@$(CODEX_VERSION) >/dev/null 2>&1 && \
		ln -sf ../node/node_modules/@openai/codex/bin/codex.js $(BIN)/codex; } || \
		echo "note: the Codex CLI could not be installed (npm install @openai/codex@$(CODEX_VERSION)): its tests are skipped"

# Arize Phoenix, the OpenTelemetry receiver the tests of --palette-otlp send traces to (tests/phoenix_server.py): in a
# venv of its own, pinned, from PyPI (some 140 packages, several of which would clash with the hosts' clients here).
PHOENIX_VENV ?= .venv-phoenix
PHOENIX_VERSION := 20.26.1
phoenix:
	@[ -x $(PHOENIX_VENV)/bin/phoenix ] || { $(PYTHON) -m venv $(PHOENIX_VENV) && \
		$(PHOENIX_VENV)/bin/python -m pip install -q arize-phoenix==$(PHOENIX_VERSION) >/dev/null 2>&1; } || \
		echo "note: Arize Phoenix could not be installed (pip install arize-phoenix==$(PHOENIX_VERSION) in $(PHOENIX_VENV)): the OTLP tests are skipped"

setup: $(STAMP)

bench: $(STAMP)
	$(BIN)/python -m pytest -n 2 --host=react --model=rehearsal

converse: $(STAMP)
	$(BIN)/palette-bench converse --host react --model rehearsal --workspace runs/converse-demo \
		"Build a 3-slide deck on prompt caching" --reply yes

# The venv's bin first on PATH, as an activated venv has it: the tests' sessions run the agent's `python3` hundreds
# of times, and a version manager's shim (pyenv's is a shell script) costs four times a direct start.
# tests/test_published_skill.py makes its own shims folder, for the case where that is the point.
# Three workers on two cores: the tests wait on real processes, servers and time limits, and a third worker fills
# those waits (measured: 1.6 cores busy with two workers, 1.9 with three).
# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set (CI sets it): each pytest session the tests start
# rewrites the asserts of every module of every installed plugin's package (ours, langsmith, hypothesis, anyio: 400
# modules), and without a cache it does so again in every session (measured on a fresh clone: 4.1 → 2.0 CPU-s to
# start a session). The package is compiled first for the sandboxed Pythons (the engine), which cannot write it.
test: $(STAMP) bun codex phoenix
	$(BIN)/python -m compileall -q pytest_palette >/dev/null
	PYTHONDONTWRITEBYTECODE= PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest tests -n 3 --dist worksteal --timeout 600

# The inner loop: the unit tests only, in about a minute. Not a replacement for `make test`, which CI runs.
quick: $(STAMP)
	$(BIN)/python -m pytest tests -n 2 -m "not end_to_end and not slow" -q

lint: $(STAMP)
	$(BIN)/ruff check pytest_palette tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(PHOENIX_VENV)
