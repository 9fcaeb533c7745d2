# fakedev — everything a fresh machine needs goes through these targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV ?= .venv
PY := $(VENV)/bin/python
FAKEDEV := $(VENV)/bin/fakedev
STAMP := $(VENV)/.installed
JOBS ?= 2
FUZZ_EXAMPLES ?= 10000
export GOTOOLCHAIN := local
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help deps venv build image run test test-fast check bench fuzz cluster cluster-down gomod release-table clean

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

deps: ## Install the Debian packages fakedev needs (runc, busybox-static, iproute2, util-linux, gcc, libseccomp-dev, iptables, Go check)
	@scripts/install-system-deps.sh

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

venv: $(STAMP) ## Create .venv with fakedev and its tools (then .venv/bin/fakedev is the CLI)

build: deps venv ## Build (or reuse the cache of) the Kubernetes 1.37 control plane, kubelet, containerd, runc, CNI plugins, helm
	$(FAKEDEV) cluster build --with-node --with-helm
	$(PY) -m harness.conformance.exdriver

image: deps venv ## The fakedev OCI image: build/image/fakedev-<version>.oci.tar (cached in ~/.cache/fakedev/image)
	$(FAKEDEV) image build --out build/image

run: build ## Local control plane + emulated dgx-h100 node + the default drills, with a report
	$(FAKEDEV) run

test: build check ## Everything CI runs
	$(PY) -m pytest -n $(JOBS) --dist loadgroup

test-fast: venv ## Unit tests only (no control plane, no root)
	$(PY) -m pytest -m "not cluster and not privileged"

check: venv ## ruff, mypy --strict, import-linter layering contracts
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench: build ## Benchmarks; results in build/bench/results.json
	$(FAKEDEV) bench --out build/bench

.PHONY: deviceclasses
deviceclasses: venv ## Regenerate deploy/deviceclasses/ and the chart's DeviceClass table from fakedev/render/classes.py
	$(FAKEDEV) deviceclasses --update .

fuzz: venv ## Standing fuzz run: 10 000 random examples per target (FUZZ_EXAMPLES=N), then per-target figures
	FAKEDEV_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/fuzz -m fuzz -n $(JOBS) -q

cluster: build ## Start a local control plane in the background (stop it with `make cluster-down`)
	$(FAKEDEV) cluster up
	@$(FAKEDEV) cluster env

cluster-down: venv ## Stop the background control plane
	$(FAKEDEV) cluster down

gomod: venv ## Regenerate the Kubernetes wrapper go.mod from upstream's (maintainers)
	$(PY) -c 'from harness.cluster.gomod import regenerate; print(regenerate())'

release-table: venv ## Regenerate the release × attribute table in docs/profiles.md from the renderers
	$(FAKEDEV) profile schemas --markdown --update docs/profiles.md

clean: ## Remove the virtualenv and build outputs (the binary cache in ~/.cache/fakedev stays)
	rm -rf $(VENV) build .mypy_cache .ruff_cache
