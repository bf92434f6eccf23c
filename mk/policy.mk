# Policy pack (policy/): CrossGuard rules run against every real preview and up. docs/ci.md lists the rules.
.PHONY: policy-venv policy-deps policy-preview

## make policy-preview STACK=dev   the same as make preview, which runs the mlfleet policy pack (mandatory rules block)
policy-venv: policy/venv/.installed

# Pulumi installs no dependencies of a local pack: the Python analyzer runs policy/venv/bin/python
# (PulumiPolicy.yaml virtualenv: venv) and stops when it is missing (policy/requirements.txt says more).
policy/venv/.installed: policy/requirements.txt
	$(PYTHON) -m venv policy/venv
	policy/venv/bin/pip install --quiet -r policy/requirements.txt
	@touch $@

# What pulumi_with_policy_pack needs before Pulumi runs: the pack's virtualenv, and the program's, through
# whose config model the pack's config is derived (Makefile, $(BIN)/python). A recipe, so that nothing is
# said when both are there.
policy-deps: $(BIN)/python policy-venv
	@:

# `pulumi $(1)` with the pack and the config scripts/policy_config.py derives from the stack file, as in CI
# (docs/ci.md), written to a temporary file removed when the shell exits, so no run reads a config derived
# from an older stack file. One --policy-pack-config per --policy-pack, in the same order (pulumi/pulumi
# pkg/cmd/pulumi/operations/up.go and preview.go, validatePolicyPackConfig). Used by preview and up (Makefile)
# after require_stack and a sub-make of policy-deps, so the usage and the preflight come before anything is
# installed. $(BIN)/python, not $(PY): a recipe is expanded before its first line runs, before the sub-make.
define pulumi_with_policy_pack
	set -euo pipefail; config=$$(mktemp); trap 'rm -f "$$config"' EXIT; \
	$(BIN)/python scripts/policy_config.py $(STACK) > "$$config"; \
	pulumi $(1) --stack $(STACK) --policy-pack policy --policy-pack-config "$$config"
endef

# Kept for the habit: before make preview ran the pack, this was the only local run that did.
policy-preview: preview
