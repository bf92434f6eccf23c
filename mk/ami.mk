# The GPU image (docs/ami.md). Regions come from the committed stack file, so the image is copied to
# exactly the regions the stack's fleets run in.
## make ami ENV=dev [CONNECT=session_manager SUBNET=subnet-... [PROFILE=NAME]]   build the GPU image with Packer for a stack's regions (needs AWS, packer; CONNECT=session_manager: no public IP, SSH through Session Manager, needs session-manager-plugin)
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

# CONNECT (connect_via) is passed only when given, so the template's default stays the one default. The
# private build (CONNECT=session_manager) needs the plugin Packer tunnels SSH through, and a subnet: without
# one Packer picks the default VPC, where an instance without a public IP reaches neither SSM nor the
# package repositories (docs/ami.md, "How Packer reaches the build instance").
SESSION_MANAGER_PLUGIN_INSTALL = https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-install-plugin.html

ami:
	$(require_ami_env)
	@case "$(CONNECT)" in ""|public_ip|session_manager) ;; *) echo "CONNECT=$(CONNECT) is not a way to reach the build instance: CONNECT=session_manager (no public IP; docs/ami.md) or CONNECT=public_ip"; exit 2;; esac
	@test "$(CONNECT)" != session_manager -o -n "$(SUBNET)" || { echo "usage: make ami ENV=$(AMI_ENV) CONNECT=session_manager SUBNET=<private subnet reaching SSM and the package repositories> [PROFILE=<instance profile with SSM>]"; exit 2; }
	@command -v packer > /dev/null || { echo "packer is missing: https://developer.hashicorp.com/packer/install"; exit 1; }
	@test "$(CONNECT)" != session_manager || command -v session-manager-plugin > /dev/null || { echo "session-manager-plugin is missing (CONNECT=session_manager tunnels SSH through it): $(SESSION_MANAGER_PLUGIN_INSTALL)"; exit 1; }
	@test -z "$$(git status --porcelain -- packer/)" || { echo "packer/ has uncommitted changes: commit them, the image is tagged with the git revision"; exit 1; }
	packer init packer/
	packer build -var-file=packer/versions.pkrvars.hcl \
		-var environment=$(AMI_ENV) \
		-var 'ami_regions=$(AMI_REGIONS_HCL)' \
		-var region=$(AMI_FIRST_REGION) \
		-var git_revision=$$(git rev-parse HEAD) \
		$(if $(CONNECT),-var connect_via=$(CONNECT)) $(if $(SUBNET),-var subnet_id=$(SUBNET)) $(if $(PROFILE),-var iam_instance_profile=$(PROFILE)) \
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
