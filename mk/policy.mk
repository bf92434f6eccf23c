# Policy pack (policy/): CrossGuard rules run against a real preview. docs/ci.md lists the rules.
.PHONY: policy-venv policy-preview

## make policy-preview STACK=dev   preview a stack with the mlfleet policy pack (mandatory rules block)
policy-venv: policy/venv/.installed

policy/venv/.installed: policy/requirements.txt
	$(PYTHON) -m venv policy/venv
	policy/venv/bin/pip install --quiet -r policy/requirements.txt
	@touch $@

policy-preview: policy-venv
	$(require_stack)
	pulumi preview -s $(STACK) --policy-pack policy
