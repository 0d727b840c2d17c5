# llmtrain.slurm: every target works from a fresh Debian 12 / Ubuntu machine as root and
# installs what it needs (idempotently).
PYTHON ?= python3
VENV   := .venv
BIN    := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
PYTEST_ARGS ?=

.PHONY: venv cluster cluster-down pretrain test test-unit test-integration lint bench clean

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
	  echo "Installing python3-venv (the venv module is missing)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; }
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -r requirements.txt
	touch $@

# A real Slurm cluster on this machine: slurmctld + one slurmd per node, each node in its
# own network namespace (needs root).
cluster: venv
	ansible-playbook playbooks/local_cluster.yml

cluster-down: venv
	ansible-playbook playbooks/local_cluster.yml -e local_cluster_state=absent

# Fresh machine -> finished run on the local cluster.
pretrain: venv
	ansible-playbook playbooks/pretrain.yml

# Fresh machine -> every test: unit first, then integration on the local cluster (the
# test session brings it up and takes it down again).
test: venv test-unit test-integration

test-unit: venv
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

test-integration: venv
	$(BIN)/pytest tests/integration $(PYTEST_ARGS)

lint: venv
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint
	$(BIN)/antsibull-changelog lint

# Speed and memory figures, printed and written to docs/benchmarks.md.
bench: venv
	$(BIN)/python bench/report.py

clean:
	rm -rf $(VENV) .pytest_cache tests/output
