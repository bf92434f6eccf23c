# Policy pack (policy/): CrossGuard rules run against a real preview. docs/ci.md lists the rules.
.PHONY: policy-venv policy-preview

## make policy-preview STACK=dev   preview a stack with the mlfleet policy pack (mandatory rules block)
policy-venv: policy/venv/.installed

policy/venv/.installed: policy/requirements.txt
	$(PYTHON) -m venv policy/venv
	policy/venv/bin/pip install --quiet -r policy/requirements.txt
	@touch $@

# The pack's config comes from the stack file, as in CI (scripts/policy_config.py, docs/ci.md): one
# --policy-pack-config per --policy-pack. Written under .pulumi-policy/, which Git ignores.
POLICY_CONFIG = $(CURDIR)/.pulumi-policy/$(STACK).json

policy-preview: policy-venv
	$(require_stack)
	@mkdir -p $(dir $(POLICY_CONFIG))
	$(PY) scripts/policy_config.py $(STACK) > $(POLICY_CONFIG)
	pulumi preview -s $(STACK) --policy-pack policy --policy-pack-config $(POLICY_CONFIG)
