# Billing: the one account-wide step `pulumi up` cannot take (docs/billing.md, docs/first-deploy.md).
.PHONY: cost-tag cost-tag-status

## make cost-tag               activate the mlfleet:environment cost allocation tag (once per account: management account, a day after the first up)
## make cost-tag-status        is the cost allocation tag active?
cost-tag:
	$(PY) scripts/cost_allocation_tag.py activate

cost-tag-status:
	$(PY) scripts/cost_allocation_tag.py status
