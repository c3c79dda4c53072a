# Two commands on a fresh machine: `make run` (the server, with one demo video) and `make test`.
# Both create .venv and install the pinned CPU stack first (once; re-run when pins change).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PROMPT ?= a red fox running through fresh snow, cinematic
# The suite's parallel workers (pytest-xdist): much of its time is waiting for Ray, rank processes
# and servers, so three workers keep two cores busy (with two they were idle 13% of the run, which
# took 626 s under a /proc sampler; 525 s with three). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 3

.PHONY: install run test clean

$(BIN)/pipedit: requirements-cpu.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -r requirements-cpu.txt 2>&1 | grep -v "^WARNING: Location" || true
	$(BIN)/pip install --quiet --no-deps -e . 2>&1 | grep -v "^WARNING: Location" || true
	$(BIN)/python -c "import pipedit.cli, torch, diffusers, ray" && touch $(BIN)/pipedit

install: $(BIN)/pipedit

run: install
	$(BIN)/pipedit serve --config configs/demo-cpu.yaml --demo-prompt "$(PROMPT)"

test: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

clean:
	rm -rf $(VENV) outputs .pytest_cache
