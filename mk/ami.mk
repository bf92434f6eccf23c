# The GPU image (docs/ami.md). Regions come from the committed stack file, so the image is copied to
# exactly the regions the stack's fleets run in.
## make ami ENV=dev                  build the GPU image with Packer for a stack's regions (needs AWS, packer)
## make ami-test ENV=dev SUBNET=subnet-... PROFILE=NAME [IMAGE=ami-...]   boot one instance and validate the image (needs AWS)
## make ami-clean ENV=dev [IN_USE=ami-..|none] [KEEP=1] [YES=1] [DRY_RUN=1]   remove images no stack uses (needs AWS)

.PHONY: ami ami-test ami-clean

AMI_ENV = $(or $(ENV),$(STACK))
AMI_REGIONS = $(shell $(PY) scripts/stack_value.py $(AMI_ENV) mlfleet:regions)
AMI_FIRST_REGION = $(firstword $(AMI_REGIONS))
ami_comma := ,
ami_empty :=
ami_space := $(ami_empty) $(ami_empty)
# ["us-east-1","us-west-2"]: the HCL list Packer's ami_regions variable takes.
AMI_REGIONS_HCL = [$(subst $(ami_space),$(ami_comma),$(patsubst %,"%",$(AMI_REGIONS)))]
KEEP ?= 1

define require_ami_env
	@test -n "$(AMI_ENV)" || { echo "usage: make $@ ENV=dev|staging|prod"; exit 2; }
	@$(PY) scripts/stack_value.py $(AMI_ENV) mlfleet:regions > /dev/null
endef

ami:
	$(require_ami_env)
	@command -v packer > /dev/null || { echo "packer is missing: https://developer.hashicorp.com/packer/install"; exit 1; }
	@test -z "$$(git status --porcelain -- packer/)" || { echo "packer/ has uncommitted changes: commit them, the image is tagged with the git revision"; exit 1; }
	packer init packer/
	packer build -var-file=packer/versions.pkrvars.hcl \
		-var environment=$(AMI_ENV) \
		-var 'ami_regions=$(AMI_REGIONS_HCL)' \
		-var region=$(AMI_FIRST_REGION) \
		-var git_revision=$$(git rev-parse HEAD) \
		packer/

ami-test:
	$(require_ami_env)
	@test -n "$(SUBNET)" -a -n "$(PROFILE)" || { echo "usage: make ami-test ENV=$(AMI_ENV) SUBNET=<private subnet reaching SSM> PROFILE=<instance profile with SSM> [IMAGE=ami-...]"; exit 2; }
	$(PY) -m packer.ami_test --environment $(AMI_ENV) --region $(AMI_FIRST_REGION) \
		--subnet-id $(SUBNET) --instance-profile $(PROFILE) $(if $(IMAGE),--image-id $(IMAGE),)

# In use: IN_USE when given (IN_USE=none after `pulumi destroy`), else the stack's outputs
# (regions.<region>.amiId) when the Pulumi CLI is installed; never a guess.
ami-clean:
	$(require_ami_env)
	@set -euo pipefail; \
	if [ -n "$(IN_USE)" ]; then \
		in_use=(--in-use "$(IN_USE)"); \
	elif command -v pulumi > /dev/null; then \
		outputs=$$(mktemp); trap 'rm -f "$$outputs"' EXIT; \
		pulumi stack output --json --stack $(AMI_ENV) > "$$outputs"; \
		in_use=(--in-use-from-stack-output "$$outputs"); \
	else \
		echo "pulumi is not installed: say which images are in use with IN_USE=ami-...,ami-... (or IN_USE=none)"; exit 2; \
	fi; \
	$(PY) -m packer.ami_clean --environment $(AMI_ENV) --regions $(subst $(ami_space),$(ami_comma),$(AMI_REGIONS)) \
		"$${in_use[@]}" --keep-newest $(KEEP) $(if $(YES),--yes,) $(if $(DRY_RUN),--dry-run,)
