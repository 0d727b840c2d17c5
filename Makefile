# llmtrain.slurm: every target works from a fresh Debian 12 / Ubuntu machine as root and
# installs what it needs (idempotently).
PYTHON ?= python3
VENV   := .venv
BIN    := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
PYTEST_ARGS ?=

.PHONY: venv cluster cluster-down pretrain test test-unit test-integration test-releases molecule lint sanity units \
	ansible-test-tree docs changelog goldens bench clean

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

# Fresh machine -> every test: unit first (pytest: the plugin tests with the others), then
# integration on the local cluster (the test session brings it up and takes it down again).
# `make units` runs the plugin tests again the way ansible-test imports the collection; the
# import path it checks, `make sanity`'s import test checks too, so `make test` does not run
# the same tests twice.
# The release streams and molecule side by side: each brings up clusters of its own (streams 10 and
# 11, and the default local cluster), and each mostly waits on Slurm.
test: venv test-unit test-integration
	$(MAKE) -j2 --output-sync=target test-releases molecule

# Two workers (pytest-xdist): the trainer's tests wait on their own rank processes, so the
# unit tests take about 2.5 minutes here instead of 4. UNIT_WORKERS=0 runs them in one process.
UNIT_WORKERS ?= 2
test-unit: venv
	$(BIN)/pytest tests/unit -n $(UNIT_WORKERS) $(PYTEST_ARGS)

# Integration tests in INTEGRATION_STREAMS parallel streams (pytest-xdist workers), each on a
# local cluster of its own (tests/integration/cluster.py): while one stream waits on Slurm the
# other works. The end says how long each stream took, and the slowest tests.
# INTEGRATION_STREAMS=0 runs them in one process on the one cluster `make cluster` makes.
INTEGRATION_STREAMS ?= 2
test-integration: venv
	$(BIN)/pytest tests/integration -n $(INTEGRATION_STREAMS) --durations=40 $(PYTEST_ARGS)

# The tests marked `releases` again on each newer Slurm release, each on a cluster of its own
# run from a minimal Debian root of that release (local_cluster_release; the roots are built
# once and kept in /var/cache/llmtrain-local-cluster): one stream per release, side by side.
# Those marked on=N run on one of them, so that the two streams take about the same time; those
# that read what differs from release to release run on both (tests/integration/conftest.py).
RELEASES ?= 24.11,26.05
comma := ,
test-releases: venv
	LLMTRAIN_TEST_RELEASES=$(RELEASES) $(BIN)/pytest tests/integration -m releases \
	  -n $(words $(subst $(comma), ,$(RELEASES))) --dist each --durations=20 $(PYTEST_ARGS)

# Molecule scenarios on the real local cluster (extensions/molecule, built-in default driver
# on localhost): default brings the cluster up, runs playbooks/pretrain.yml, runs it again
# (no change allowed), verifies the artifacts and takes the cluster down; gpu_mismatch
# registers placeholder GPUs and checks that the first job's node check stops the run,
# naming every node, before any training job.
molecule: venv
	$(BIN)/molecule test --all

lint: venv sanity
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint
	$(BIN)/antsibull-changelog lint

# ansible-test needs the collection in a directory named ansible_collections/llmtrain/slurm.
# This tree is made fresh each time from the files git knows (tracked, and untracked but not
# ignored: no .venv, runs/ or caches; not the .collections link, which sanity rejects and
# this tree does not need; a file deleted but not yet staged is a tar warning). It gets a git
# repository of its own because ansible-test lists the files through the nearest one, and
# this checkout's ignores tests/output.
ANSIBLE_TEST_TREE := tests/output/collection/ansible_collections/llmtrain/slurm
ANSIBLE_TEST = cd $(ANSIBLE_TEST_TREE) && $(BIN)/ansible-test
ANSIBLE_TEST_PYTHON = $(shell $(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')

ansible-test-tree: venv
	rm -rf tests/output/collection
	mkdir -p $(ANSIBLE_TEST_TREE)
	git ls-files -z --cached --others --exclude-standard -- . ':!.collections' \
	  | tar --null --ignore-failed-read --files-from=- -cf - | tar -xf - -C $(ANSIBLE_TEST_TREE)
	git -C $(ANSIBLE_TEST_TREE) init --quiet

# ansible-test sanity: every module, plugin, role file and script (pylint, pep8,
# validate-modules, ansible-doc, import, compile, shebang, yamllint, ...); each test's tools
# are installed once into ~/.ansible/test/venv.
sanity: ansible-test-tree
	$(BIN)/python tools/ansible_test_pip.py >/dev/null
	$(ANSIBLE_TEST) sanity --local --python $(ANSIBLE_TEST_PYTHON) $(ANSIBLE_TEST_ARGS)

# ansible-test units on the plugin tests (make test-unit runs them too, under pytest), with this
# venv's Python (it has pytest-xdist, pytest-mock and mock from requirements.txt), the way
# Ansible's own CI imports the collection. The trainer, run report and inventory tests run under pytest only (make
# test-unit): the trainer's need torch, which ansible-test's own environments lack, and
# they train in subprocesses that ansible-test's parallel workers slow about six times.
units: ansible-test-tree
	$(ANSIBLE_TEST) units --local --python $(ANSIBLE_TEST_PYTHON) $(ANSIBLE_TEST_ARGS) tests/unit/plugins/

# The reference under docs/ (docs/reference.md, docs/{modules,callback,filter,roles}/) from
# the plugins' documentation and the roles' meta/argument_specs.yml; tests/unit/test_docs.py
# fails when the committed pages differ from what this writes. Also docs/exit-codes.md and
# roles/run/files/exit_codes.sh from the table of exit codes (plugins/module_utils/node/exit_codes.py;
# tests/unit/test_exit_codes.py).
docs: venv
	$(BIN)/python tools/docs.py
	$(BIN)/python tools/exit_codes.py

# CHANGELOG.md and changelogs/changelog.yaml from changelogs/fragments. The fragments stay
# (keep_fragments): until the version in galaxy.yml is published, running this again folds
# new and edited fragments into that version's entry (the warnings "release ... already exists"
# and "no release_summary" are expected then). tests/unit/test_changelog.py fails when a
# fragment is not in it yet.
changelog: venv
	$(BIN)/antsibull-changelog release --reload-plugins --refresh

# The golden job scripts of every stage (tests/unit/golden/jobs/<stage>/<inventory>.sbatch), written
# anew from the stages' classes (plugins/module_utils/jobs/); the unit tests fail while they differ.
# Read their diff before committing it: it is what every job of such a run will run.
goldens: venv
	LLMTRAIN_GOLDEN=write $(BIN)/pytest -q -p no:cacheprovider tests/unit/jobs

# Speed and memory figures, printed and written to docs/benchmarks.md; one section again:
# make bench BENCH_ARGS="--only Trainer"
bench: venv
	$(BIN)/python bench/report.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache tests/output
