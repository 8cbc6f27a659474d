# posenc: `make demo` runs the quick reproduction, `make test` the test suite,
# `make bench` the benchmarks. Each target creates/refreshes .venv with the
# tested versions pinned in constraints.txt.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OUT ?= runs/demo
FULL ?= runs/full

VENV_OLDEST ?= .venv-oldest

.PHONY: demo test test-oldest bench install clean docs support results

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[all]"
	# timm for tests/test_timm_interop.py, without torchvision (no build of it loads beside CPU torch)
	$(BIN)/python -m pip install --quiet -c constraints.txt --no-deps timm
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/posenc reproduce --profile quick --out $(OUT) --workers 2
	@echo "report: $(OUT)/report.md"

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q

# The oldest tested versions (constraints-oldest.txt = pyproject's lower bounds), in their own venv.
# PyPI's Linux torch wheels of that age are CUDA builds (~2.7 GB with their nvidia-* wheels); they
# run on a CPU. Tests that need a newer torch skip, naming the version.
test-oldest:
	test -x $(VENV_OLDEST)/bin/python || $(PYTHON) -m venv $(VENV_OLDEST)
	$(VENV_OLDEST)/bin/python -m pip install --quiet -c constraints-oldest.txt torch "setuptools>=77"
	$(VENV_OLDEST)/bin/python -m pip install --quiet -c constraints-oldest.txt -e ".[all]"
	nice -n 10 $(VENV_OLDEST)/bin/python -m pytest -n 2 -q

bench: $(STAMP)
	$(BIN)/python -m benchmarks --out benchmarks/results

# The API reference and guides as a static site in site/ (mkdocs + Material + mkdocstrings, offline).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

# docs/api/support.md: torch.compile / torch.export / TorchScript, re-probed for every public module.
support: $(STAMP)
	$(BIN)/python -m tools.support

# docs/results.md from the report summaries of $(OUT) (copied to docs/data/ when $(OUT) exists), the
# full profiles of $(FULL) (copied to docs/data/full/ when it exists)
# and benchmarks/results/*.json: run after `make demo` and `make bench`.
results: $(STAMP)
	$(BIN)/python -m tools.results --runs $(OUT) --full $(FULL)

clean:
	rm -rf $(VENV) $(VENV_OLDEST) runs site .pytest_cache
