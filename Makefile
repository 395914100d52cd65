# The two commands of the README:
#   make smoke   set up (when needed) and train two workers on this machine
#   make test    set up (when needed) and run every test
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV := $(CURDIR)/.venv
STAMP := $(VENV)/.requirements.sha256
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PYTHONDONTWRITEBYTECODE := 1
PYTEST := $(VENV)/bin/python -m pytest

.PHONY: help setup smoke test docs lint unit sanity molecule integration multihost integration-local integration-hosts bench bench-issue26 bench-issue42 bench-controller bench-mitogen clean

help:
	@echo "make smoke  - set up and run the two-worker smoke training on localhost"
	@echo "make test   - set up and run every test (lint, unit, molecule, integration)"
	@echo "make docs   - regenerate the variable tables of docs/variables.md (checked by make unit)"
	@echo "make lint | unit | sanity | molecule | integration | multihost | bench | bench-issue26 | bench-issue42 | bench-controller | bench-mitogen"

# The controller needs Python >= 3.12 (ansible-core 2.21). Look on PATH, then in pyenv and
# the usual prefixes; say clearly what was tried when none is found.
$(STAMP): requirements.txt
	@py=""; \
	for cand in "$${PYTHON:-}" python3.13 python3.12 python3 \
	    $$HOME/.pyenv/versions/3.1[2-9]*/bin/python3 /usr/local/bin/python3.1[2-9] /usr/bin/python3.1[2-9]; do \
	  [ -n "$$cand" ] || continue; \
	  path=$$(command -v "$$cand" 2>/dev/null) || continue; \
	  if "$$path" -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then py=$$path; break; fi; \
	done; \
	if [ -z "$$py" ]; then \
	  echo "error: no Python >= 3.12 found (tried \$$PYTHON, python3.13, python3.12, python3, ~/.pyenv/versions/3.12+, /usr/local/bin, /usr/bin)." >&2; \
	  echo "       ansible-core 2.21 needs Python 3.12 or newer on the controller: install one or set PYTHON=/path/to/python3.12" >&2; \
	  exit 1; \
	fi; \
	want=$$(sha256sum requirements.txt | cut -d' ' -f1); \
	if [ -x "$(VENV)/bin/python" ] && ! "$(VENV)/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
	  echo "removing $(VENV): it was built with a Python older than 3.12"; rm -rf "$(VENV)"; \
	fi; \
	if [ ! -x "$(VENV)/bin/python" ]; then echo "creating $(VENV) with $$py"; "$$py" -m venv "$(VENV)"; fi; \
	"$(VENV)/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements.txt 2> >(grep -v "^WARNING: Location" >&2); \
	echo "$$want" > "$(STAMP)"

setup: $(STAMP)

smoke: setup
	ansible-playbook train.yml --limit localhost

# The variable tables of docs/variables.md, from every role's meta/argument_specs.yml and
# defaults/main.yml. `make unit` (so `make test`) fails when the committed file is stale
# (tests/unit/test_docs_variables.py), or when a link of README.md or docs/ is broken.
docs: setup
	$(VENV)/bin/python tests/docs/docs_variables.py

lint: setup
	yamllint --strict .
	ansible-lint --profile production

unit: setup
	$(PYTEST) tests/unit

# The collection tf_runbook.multiworker (galaxy.yml): build it with ansible-galaxy, unpack
# it under <temporary dir>/ansible_collections/tf_runbook/multiworker/ (where ansible-test
# needs it, outside this git tree) and run ansible-test sanity on its plugins/, in a
# virtualenv of its own (.cache/sanity-venv: ansible-test installs its pinned linters
# there, never in .venv) and a private HOME (.cache/sanity-home) whose pip bootstrap is
# tests/sanity/get_pip.py.
SANITY_VENV := $(CURDIR)/.cache/sanity-venv
SANITY_HOME := $(CURDIR)/.cache/sanity-home
SANITY_TARGETS := plugins/
sanity: setup
	@if [ ! -x "$(SANITY_VENV)/bin/ansible-test" ]; then \
	  $(VENV)/bin/python -m venv "$(SANITY_VENV)"; \
	  "$(SANITY_VENV)/bin/python" -m pip install --quiet $$(grep -i '^ansible-core' requirements.txt) 2> >(grep -v "^WARNING: Location" >&2); \
	fi
	pip=$$("$(SANITY_VENV)/bin/python" -c 'import re, ansible_test._internal.python_requirements as r, inspect; print(re.search(r"pip=.([0-9.]+)", inspect.getsource(r)).group(1))'); \
	  mkdir -p "$(SANITY_HOME)/.ansible/test/cache"; \
	  cp tests/sanity/get_pip.py "$(SANITY_HOME)/.ansible/test/cache/get_pip_$${pip//./_}.py"
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  tree="$$tmp/ansible_collections/tf_runbook/multiworker"; mkdir -p "$$tree"; \
	  ansible-galaxy collection build --output-path "$$tmp"; \
	  tar -xzf "$$tmp"/tf_runbook-multiworker-*.tar.gz -C "$$tree"; \
	  cd "$$tree" && HOME="$(SANITY_HOME)" PATH="$(SANITY_VENV)/bin:$$PATH" \
	    ansible-test sanity --local --python 3.12 --requirements $(SANITY_TARGETS)

# Every scenario of every role (roles/*/molecule/*/), one role after the other, with the
# time each took. They share this machine's ports 2940/2950 and /tmp/molecule-tf-*.
molecule: setup
	@for scenarios in roles/*/molecule; do \
	  role=$$(basename $$(dirname $$scenarios)); start=$$(date +%s); \
	  echo "== molecule: $$role"; \
	  (cd roles/$$role && molecule test --all); \
	  echo "== molecule: $$role passed in $$(( $$(date +%s) - start )) s"; \
	done

# Playbook runs on localhost (the smoke run, --forks 1, two runs in a row, bad input).
integration: setup
	$(PYTEST) tests/integration -m "not multihost"

# SSH tests on network-namespace hosts (needs root; installs openssh-server if missing).
multihost: setup
	$(PYTEST) tests/integration -m multihost

# Everything, in two parallel steps that cannot disturb each other: the static checks
# (lint, unit tests, sanity) side by side, each buffered until it ends; then molecule; then
# the integration tests in two shards side by side, line by line (-v names each test, the
# prefix its shard).
# Tests on localhost share this machine's ports, so they all run in one shard, one after
# the other. Tests on network-namespace hosts (the multihost marker) have their own network
# stacks, names and directories (tests/integration/nshosts.py) and run in either shard:
# the long-runs file, then test_faults (last, as before), follow the localhost tests, to
# even out the two (in the CI run of 2026-12-07 the localhost shard took 30 min with the
# cluster-shape file too, the other 27). --durations names the slowest tests.
test: setup
	$(MAKE) --no-print-directory -j3 --output-sync=target lint unit sanity
	$(MAKE) --no-print-directory molecule
	$(MAKE) --no-print-directory -j2 integration-local integration-hosts

TEST_TMP := $(or $(TMPDIR),/tmp)/tf-runbook-tests
SHARD_A_HOSTS := tests/integration/test_long_runs.py
# Each line of a shard's output is written whole, as it ends, with the shard's name in
# front (sed -u), so that the two shards' lines interleave without mixing; pipefail (in
# .SHELLFLAGS) keeps pytest's exit status.
integration-local: setup
	$(PYTEST) tests/integration -m "not multihost" -v --durations=10 --basetemp=$(TEST_TMP)-local 2>&1 \
	  | /usr/bin/sed -u 's/^/[local] /'
	$(PYTEST) $(SHARD_A_HOSTS) -v --durations=10 --basetemp=$(TEST_TMP)-local-hosts 2>&1 | /usr/bin/sed -u 's/^/[local] /'
	$(PYTEST) tests/integration/test_faults.py -v --durations=10 --basetemp=$(TEST_TMP)-faults 2>&1 | /usr/bin/sed -u 's/^/[local] /'
	@echo "== integration (localhost, then $(SHARD_A_HOSTS), then the faults) passed"

integration-hosts: setup
	$(PYTEST) tests/integration -m multihost -v --durations=10 --basetemp=$(TEST_TMP)-hosts \
	  --ignore=tests/integration/test_faults.py $(addprefix --ignore=,$(SHARD_A_HOSTS)) 2>&1 | /usr/bin/sed -u 's/^/[hosts] /'
	@echo "== integration (namespace hosts) passed"

# The whole measurement of docs/BENCHMARKS.md (medians of 5; about an hour on 2 cores).
bench: setup
	$(VENV)/bin/python tests/bench/bench.py

# Pieces, merged into the last run's figures. Issue 26's figures alone (about 25 min on 2
# cores; the script prints its estimate first): the smoke against the hand launch and the
# controller's CPU per host at N = 2 to 64, this tree beside the baseline commit.
bench-issue26: setup
	$(VENV)/bin/python tests/bench/bench.py --parts issue26 --merge

# Issue 42's figures, merged into the last run's: the smoke against the hand launch, a
# restart's latency split into its steps, the checkpoint copy of 1 GB to 1 and 8 hosts
# (time, and the bytes through the controller), and the controller's CPU per host at
# N = 2, 16 and 64 (add 128 with ORCH_SIZES=2,16,64,128 on a quiet machine; 64 and 128
# run once each), this tree beside c5c7618 (the tree before issue 42), runs interleaved.
ORCH_SIZES ?= 2,16,64
bench-issue42: setup
	$(VENV)/bin/python tests/bench/bench.py --parts issue42 --baseline-ref c5c7618 --orch-sizes $(ORCH_SIZES) \
		--orch-reps-at 64:1,128:1 --merge

# The controller's cost per host (this tree vs the baseline commit), and Mitogen vs the
# default strategy.
bench-controller: setup
	$(VENV)/bin/python tests/bench/bench.py --parts orch --merge

bench-mitogen: setup
	$(VENV)/bin/python tests/bench/bench.py --parts mitogen --merge

clean:
	rm -rf $(VENV) .pytest_cache
