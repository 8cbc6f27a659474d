# posenc: `make demo` runs the quick reproduction, `make test` the test suite,
# `make bench` the benchmarks. Each target creates/refreshes .venv with the
# tested versions pinned in constraints.txt.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OUT ?= runs/demo

.PHONY: demo test bench install clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[all]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/posenc reproduce --profile quick --out $(OUT)
	@echo "report: $(OUT)/report.md"

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q

bench: $(STAMP)
	$(BIN)/python -m benchmarks --out benchmarks/results

clean:
	rm -rf $(VENV) runs .pytest_cache
