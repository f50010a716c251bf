# Every target runs tools from .venv by path, so nothing needs activating.
# `make test` is what CI runs (through .ci/run).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# ruff is given only the directories that exist: ruff fails on a missing path,
# and tests/ or property_tests/ may not exist yet in a young checkout.
LINT_PATHS := $(wildcard cellweave cells scheduler runner tests property_tests bench examples mkdocs_hooks.py)

# Extra arguments for `make bench`, e.g. `make bench BENCH_ARGS="cells --quick"`.
BENCH_ARGS ?=

# Extra arguments for `make crash-trials`, e.g. CRASH_ARGS="--trials 20 --seed 7".
CRASH_ARGS ?=

.PHONY: venv system test typecheck docs demo bench soak crash-trials crash-trials-pg clean

venv: $(STAMP)

# Re-install only when pyproject.toml is newer than the stamp; the stamp is
# written last, so a failed install is retried on the next run. The editable
# install maps the top-level packages that existed when it ran: after adding
# one, `touch pyproject.toml` so the next target re-installs.
# pip's output goes to .venv/install.log (printed only if the install fails), so
# the first screen of `make demo` is the demo. Extras: test, bench, docs.
$(STAMP): pyproject.toml
	@echo "installing cellweave into $(VENV) (pip's log: $(VENV)/install.log)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@{ $(BIN)/python -m pip install --upgrade pip \
	   && $(BIN)/python -m pip install -e '.[test,bench,docs]'; } \
	   > $(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	@touch $(STAMP)

# What the tests need from the machine, installed with apt when missing: Debian's
# chromium for the browser tests (Playwright drives it; nothing is downloaded), and
# postgresql for PostgresStore's throwaway test server (its initdb and pg_ctl).
system:
	@bash tools/system-deps.sh

# Each line stops make on a nonzero exit, so the first failure fails the target.
# pytest's exit 5 (no tests collected) fails it too: an empty suite is not a pass.
test: venv system
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy --strict cellweave cells scheduler runner bench
	$(MAKE) --no-print-directory typecheck
	$(BIN)/lint-imports
	$(BIN)/pytest tests
	$(BIN)/pytest property_tests
	$(MAKE) --no-print-directory docs

# mypy --strict over the tests, the property tests and the examples, one run per
# directory. pytest puts each test file's directory on sys.path, so tests import
# their siblings as top-level modules (`support`, `pattern_defs`, `held_verdicts`),
# and several directories have a conftest.py: one run over all of them would see
# the same module name twice. MYPYPATH gives each run the directories its files
# import from (the property tests also import from tests/runner and
# tests/scheduler, which they put on sys.path); the runs share .mypy_cache.
TYPECHECK := $(BIN)/mypy --strict --explicit-package-bases

typecheck: venv
	MYPYPATH=tests $(TYPECHECK) $(wildcard tests/*.py)
	MYPYPATH=tests/cells $(TYPECHECK) tests/cells
	MYPYPATH=tests/cellweave $(TYPECHECK) tests/cellweave
	MYPYPATH=tests/runner $(TYPECHECK) tests/runner
	MYPYPATH=tests/scheduler $(TYPECHECK) tests/scheduler
	MYPYPATH=property_tests:tests/runner:tests/scheduler $(TYPECHECK) property_tests
	$(TYPECHECK) examples

# The documentation site (mkdocs.yml), into build/site. --strict fails the build
# on any warning: a broken link or anchor, a page left out of the nav, or a
# docstring mkdocstrings cannot render. Open build/site/index.html to read it.
# (Not --quiet: it silences the warnings, and --strict then passes a broken build.)
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
demo: venv
	$(BIN)/python -m examples.demo

bench: venv
	$(BIN)/python -m bench $(BENCH_ARGS)

# The long Hypothesis run; the property_tests conftest reads HYPOTHESIS_PROFILE.
soak: venv
	HYPOTHESIS_PROFILE=nightly $(BIN)/pytest property_tests

# SIGKILL a writer 100 times at random points against one SQLite file, then check
# that nothing acknowledged was lost (bench/crash_trials.py). Takes minutes; not
# part of `make test`. Exits nonzero if an acknowledged write, page open or page
# stop did not survive.
crash-trials: venv
	$(BIN)/python -m bench.crash_trials $(CRASH_ARGS)

# Three processes serve 200 open pages under claims on a throwaway PostgreSQL
# cluster; one is killed with SIGKILL 100 times (and restarted), one paused with
# SIGSTOP past its lease; checks fences, takeover times, acknowledged writes and
# stopped pages (bench/crash_trials_pg.py). Minutes; not part of `make test`.
# Extra arguments: CRASH_PG_ARGS="--kills 20 --seed 7".
CRASH_PG_ARGS ?=

crash-trials-pg: venv system
	$(BIN)/python -m bench.crash_trials_pg $(CRASH_PG_ARGS)

# Removes what the tools generate, the venv included (the next target that
# needs it recreates it). Keeps .hypothesis/ (its example database holds the
# failures Hypothesis found) and .cellweave/ (data a program wrote).
clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache .import_linter_cache
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
