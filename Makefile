# relpos: `make book` builds the book, `make test` runs every check. See README.md.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
JB := $(VENV)/bin/jupyter-book
STAMP := $(VENV)/.installed
CHROMIUM ?= $(shell command -v chromium 2>/dev/null || echo /usr/bin/chromium)
PORT ?= 8000

# Nothing is fetched from a model hub; matplotlib draws off-screen.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export MPLBACKEND := Agg
export RELPOS_CHROMIUM := $(CHROMIUM)

.PHONY: book test unit serve venv check-python check-chromium colab-cells colab-versions screenshots clean

# Executing a notebook can hang with the kernel idle (twice in 40 runs of nbclient with
# ipykernel 7; nbval never hung). Each cell has a timeout (_config.yml: execute.timeout;
# nbval: --nbval-cell-timeout in tools/colab_like.py), and a failed book build is run once
# more: the notebooks that executed come from the execution cache, only the failed ones
# run again. A real error fails both tries.
# tools/prime_book_cache.py first runs the pages two at a time into the build's cache.
define build_book
	$(PY) tools/prime_book_cache.py
	$(JB) build . $(1) || { echo "book build failed: trying once more (a hung kernel times out; see Makefile)"; \
	  $(JB) build . $(1); }
endef

book: check-python $(STAMP)
	$(call build_book,)
	@echo
	@echo "The book is in _build/html: open file://$(CURDIR)/_build/html/index.html, or run 'make serve'."

test: check-python check-chromium $(STAMP)
	$(PY) -m pytest -n 2 --dist loadgroup tests --ignore=tests/browser --ignore=tests/live
	$(PY) tools/colab_like.py
	$(PY) -m pytest tests/live
	$(call build_book,-W -n --keep-going)
	$(PY) -m pytest -n 2 tests/browser

# The unit tier: every test not marked slow (no kernel compilation, wheel build, training or
# child process); make test runs these and the slow ones.
unit: check-python $(STAMP)
	$(PY) -m pytest -n 2 tests --ignore=tests/browser --ignore=tests/live -m "not slow"

serve: $(STAMP)
	@test -f _build/html/index.html || { echo "error: no built book in _build/html: run 'make book' first"; exit 1; }
	@echo "Serving the book at http://127.0.0.1:$(PORT)/ (Ctrl-C stops it)"
	$(PY) -m http.server --bind 127.0.0.1 --directory _build/html $(PORT)

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml | check-python
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "error: relpos needs Python 3.11 or newer; '$(PYTHON)' is $$($(PYTHON) --version 2>&1 || echo missing)."; \
	  echo "       Install Python 3.11+ and run e.g. 'make PYTHON=python3.11 $(MAKECMDGOALS)'."; exit 1; }

check-chromium:
	@test -x "$(CHROMIUM)" || { \
	  echo "error: the browser check needs Chromium, not found at '$(CHROMIUM)'."; \
	  echo "       On Debian/Ubuntu: sudo apt-get install -y chromium   (or set CHROMIUM=/path/to/chromium)"; exit 1; }

# Every page in a stand-in of Colab's environment (its published versions, Python 3.13, pip 24.1.2),
# after checking that the set-up cell's install changes none of them: with Colab's torch, then with
# the oldest torch pyproject.toml accepts. Not part of `make test`: the first run downloads several
# GB (torch from PyPI is a CUDA build); the venvs are kept in VENVS and reused.
VENVS ?= $(HOME)/.cache/relpos/colab-venvs
colab-versions: check-python $(STAMP)
	$(PY) tools/colab_versions.py --venvs $(VENVS) --torch colab
	$(PY) tools/colab_versions.py --venvs $(VENVS) --torch floor

# Re-render every chapter's Colab set-up cell from the repository URL in _config.yml.
colab-cells: $(STAMP)
	$(PY) tools/colab_cell.py --write

# Every page and every figure (both ends of each slider) at 1280 and 390 px, in screenshots/.
screenshots: $(STAMP)
	@test -f _build/html/index.html || { echo "error: no built book in _build/html: run 'make book' first"; exit 1; }
	$(PY) tools/screenshots.py

clean:
	rm -rf _build bench_out .pytest_cache .hypothesis screenshots
