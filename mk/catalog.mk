# GPU instance catalog (docs/catalog.md). Both targets call AWS with your credentials:
# pricing:GetProducts, ec2:DescribeInstanceTypes, ec2:DescribeSpotPriceHistory; they change nothing in AWS.
.PHONY: catalog-refresh catalog-check

## make catalog-refresh   rewrite lambdas/common/data/instance_catalog.json from the AWS APIs (review the diff)
catalog-refresh:
	$(PY) -m lambdas.common.catalog_refresh $(if $(REGIONS),--regions $(REGIONS),) $(if $(FAMILIES),--families $(FAMILIES),)

## make catalog-check     exit 1 when AWS's specs, on-demand or spot prices drifted from the committed catalog
catalog-check:
	$(PY) -m lambdas.common.catalog_refresh --check $(if $(REGIONS),--regions $(REGIONS),)
