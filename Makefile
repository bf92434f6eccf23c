# mlfleet: the two commands users need are `make up STACK=<env>` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := venv
BIN := $(VENV)/bin
STACK ?=
# State lives in the local file backend unless you point PULUMI_BACKEND_URL elsewhere
# (s3://bucket/prefix, https://api.pulumi.com, ...).
PULUMI_BACKEND_URL ?= file://$(CURDIR)/.pulumi-state
export PULUMI_BACKEND_URL

.PHONY: help venv test snapshots preview up destroy lint ruff shellcheck admission-status admission-open

help:
	@echo "make up STACK=dev        deploy a stack (pulumi up with the mandatory policy pack; local file backend unless PULUMI_BACKEND_URL is set)"
	@echo "make preview STACK=dev   show what would change, checked by the mandatory policy pack"
	@echo "make destroy STACK=dev   tear the whole environment down in one pass"
	@echo "make test                install test dependencies, run the linters (ruff, shellcheck) and the whole test suite"
	@echo "make snapshots           rewrite tests/snapshots after an intended infrastructure change"
	@echo "make admission-open STACK=dev     admit jobs again after the budget guard closed admission"
	@echo "make admission-status STACK=dev   show whether the environment admits new jobs"
	@grep -hE '^## ' mk/*.mk 2>/dev/null | sed 's/^## //' || true

# Installed once, and again only when a requirements file or pyproject.toml changes (the stamp is older).
VENV_STAMP := $(VENV)/.installed

$(VENV_STAMP): requirements.txt requirements-dev.txt pyproject.toml
	@$(PYTHON) scripts/preflight.py python
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	@touch $@

venv: $(VENV_STAMP)

# The program's virtualenv when there is none yet, as Pulumi makes it on its first run (Pulumi.yaml: toolchain
# pip, virtualenv venv; requirements.txt). preview and up need it before Pulumi runs: the policy pack's config
# is derived through the config model (mk/policy.mk). `make venv` adds the test tools to the same one.
$(BIN)/python:
	@$(PYTHON) scripts/preflight.py python
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -r requirements.txt

# What the tests need is checked before anything is installed. Then the linters (ruff with pyproject.toml's
# rules, shellcheck) and the suite. worksteal: an idle worker takes queued tests from the other, so the
# fault-injection cases of 12-17 s that land last do not leave one core idle (the suite in a fresh clone:
# 285 s with it, 343 s without, one run each on the 2-core CI machine).
test:
	@$(PYTHON) scripts/preflight.py test
	@$(MAKE) --no-print-directory venv
	@$(MAKE) --no-print-directory ruff
	$(BIN)/python -m pytest -n auto --dist worksteal
	@$(MAKE) --no-print-directory shellcheck

snapshots: venv
	$(BIN)/python -m pytest tests/program/test_stacks.py --update-snapshots

ruff: venv
	$(BIN)/ruff check .

shellcheck:
	@command -v shellcheck >/dev/null || { echo "shellcheck is missing: apt-get install shellcheck"; exit 1; }
	shellcheck components/compute/*.sh $(wildcard packer/scripts/*.sh) $(wildcard scripts/*.sh)

lint: ruff shellcheck

# Deploy targets check the Pulumi CLI, the state passphrase and AWS credentials before they create the
# state folder or select a stack (scripts/preflight.py says how to get what is missing).
define require_stack
	@test -n "$(STACK)" || { echo "usage: make $@ STACK=dev|staging|prod"; exit 2; }
	@$(PY) scripts/preflight.py deploy $(STACK)
	@case "$(PULUMI_BACKEND_URL)" in file://*) mkdir -p "$(patsubst file://%,%,$(PULUMI_BACKEND_URL))";; esac
	pulumi stack select --create $(STACK)
endef

# Both run the policy pack's mandatory rules with the stack's own config, as CI does (mk/policy.mk). There is
# no switch to skip them: docs/ci.md, "The policy pack on make preview and make up", says why.
preview:
	$(require_stack)
	@+$(MAKE) --no-print-directory policy-deps
	$(call pulumi_with_policy_pack,preview --diff)

up:
	$(require_stack)
	@+$(MAKE) --no-print-directory policy-deps
	$(call pulumi_with_policy_pack,up)

# One pass: groups are force-deleted with their protected instances, no capacity provider holds the
# cluster. What outlives a stack is listed in the README ("Tear down"); images go with `make ami-clean`.
destroy:
	$(require_stack)
	pulumi destroy --stack $(STACK)
	@echo "Stack $(STACK) destroyed. Images this project built are not part of a stack: make ami-clean ENV=$(STACK)"

# Tools run with the project's venv when it exists (make venv), else the system Python (needs boto3, PyYAML).
PY = $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
HOME_REGION = $(shell $(PY) scripts/stack_value.py $(STACK) aws:region)

admission-status admission-open:
	@test -n "$(STACK)" || { echo "usage: make $@ STACK=dev|staging|prod"; exit 2; }
	$(PY) -m lambdas.common.admission $(patsubst admission-%,%,$@) --environment $(STACK) --region $(HOME_REGION) \
		$(if $(REASON),--reason "$(REASON)",)

-include mk/*.mk
