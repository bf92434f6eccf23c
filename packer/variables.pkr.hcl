# Inputs of the GPU image build. `make ami ENV=<env>` passes environment, region, ami_regions,
# git_revision and connect_via (CONNECT), and subnet_id (SUBNET) and iam_instance_profile (PROFILE) when
# given; versions.pkrvars.hcl passes the three pinned versions; everything else has a default.

variable "environment" {
  type        = string
  description = "mlfleet environment the image is built for (the stack name: dev, staging, prod, ...). Tagged as mlfleet:environment; the fleets of that stack look the image up by this tag."
  validation {
    condition     = can(regex("^(dev|staging|prod|[a-z][a-z0-9-]{1,15})$", var.environment))
    error_message = "The environment must be dev, staging, prod, or 2-16 lowercase letters, digits and dashes starting with a letter."
  }
}

variable "region" {
  type        = string
  description = "Region the build instance runs in and the image is first registered in (the stack's first fleet region)."
  validation {
    condition     = can(regex("^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]$", var.region))
    error_message = "The region must look like an AWS region name, for example us-east-1."
  }
}

variable "ami_regions" {
  type        = list(string)
  description = "Every fleet region of the stack. The image is copied (encrypted) to each; the build region may be listed too."
  validation {
    condition     = length(var.ami_regions) > 0 && alltrue([for r in var.ami_regions : can(regex("^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]$", r))])
    error_message = "The ami_regions must be a non-empty list of AWS region names, for example [\"us-east-1\", \"us-west-2\"]."
  }
}

variable "instance_type" {
  type        = string
  description = "Build instance type. It must have an NVIDIA GPU: the validation step runs nvidia-smi inside the image."
  default     = "g4dn.xlarge"
  validation {
    condition     = can(regex("^(g4dn|g5|g6|g6e|gr6|p3|p4d|p4de|p5|p5e|p5en)\\.[0-9]*[a-z]+$", var.instance_type))
    error_message = "The instance_type must be an NVIDIA GPU instance type (g4dn, g5, g6, g6e, gr6, p3, p4d, p5 families), for example g4dn.xlarge."
  }
}

variable "base_ami_id" {
  type        = string
  description = "Base AMI pinned by id. Empty: the newest Amazon ECS GPU-optimized Amazon Linux 2023 x86_64 AMI owned by Amazon (name filter base_ami_name_filter)."
  default     = ""
  validation {
    condition     = var.base_ami_id == "" || can(regex("^ami-[0-9a-f]{8,17}$", var.base_ami_id))
    error_message = "The base_ami_id must be empty or an AMI id such as ami-0123456789abcdef0."
  }
}

variable "base_ami_name_filter" {
  type        = string
  description = "Name filter for the base AMI when base_ami_id is empty. AWS names these al2023-ami-ecs-gpu-hvm-2023.0.<date>-kernel-6.1-x86_64-ebs."
  default     = "al2023-ami-ecs-gpu-hvm-2023.0.*-kernel-6.1-x86_64-ebs"
  validation {
    condition     = startswith(var.base_ami_name_filter, "al2023-ami-ecs-gpu-hvm-")
    error_message = "The base_ami_name_filter must select Amazon ECS GPU-optimized AL2023 AMIs (al2023-ami-ecs-gpu-hvm-*)."
  }
}

variable "root_volume_gib" {
  type        = number
  description = "Root volume size in GiB (gp3). Room for the CUDA toolkit, pre-pulled images and job scratch space."
  default     = 100
  validation {
    condition     = var.root_volume_gib >= 40 && var.root_volume_gib <= 16384 && floor(var.root_volume_gib) == var.root_volume_gib
    error_message = "The root_volume_gib must be a whole number from 40 to 16384."
  }
}

variable "prepull_images" {
  type        = list(string)
  description = "Public container images baked into the image so jobs start without a multi-gigabyte pull, for example [\"public.ecr.aws/docker/library/python:3.12\"]. Empty: nothing is pulled."
  default     = []
  validation {
    condition     = alltrue([for image in var.prepull_images : can(regex("^[a-z0-9][a-z0-9._/:@-]*$", image)) && length(image) <= 255])
    error_message = "Each prepull_images entry must be an image reference such as registry/repository:tag (lowercase, no spaces)."
  }
}

variable "open_files_limit" {
  type        = number
  description = "Open-file limit (nofile) for every login user, the Docker daemon, containerd and containers."
  default     = 1048576
  validation {
    condition     = var.open_files_limit >= 65536 && var.open_files_limit <= 1048576 && floor(var.open_files_limit) == var.open_files_limit
    error_message = "The open_files_limit must be a whole number from 65536 to 1048576 (the kernel's default fs.nr_open)."
  }
}

variable "git_revision" {
  type        = string
  description = "Git commit the image is built from (make ami passes `git rev-parse HEAD`). Tagged as mlfleet:git-revision."
  validation {
    condition     = can(regex("^[0-9a-f]{7,40}$", var.git_revision))
    error_message = "The git_revision must be a git commit hash (7 to 40 lowercase hex characters)."
  }
}

variable "kms_key_id" {
  type        = string
  description = "KMS key (id, alias or ARN) encrypting the image's snapshots in the build region. Empty: the account's AWS-managed EBS key."
  default     = ""
  validation {
    condition     = var.kms_key_id == "" || can(regex("^(arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:(key|alias)/.+|alias/.+|[0-9a-f-]{36}|mrk-[0-9a-f]{32})$", var.kms_key_id))
    error_message = "The kms_key_id must be empty, a key id, an alias/NAME or a KMS key or alias ARN."
  }
}

variable "region_kms_key_ids" {
  type        = map(string)
  description = "KMS key per copy region (region => key ARN), used with kms_key_id. Empty: the copies use each region's AWS-managed EBS key. When set, give a key for every region of ami_regions."
  default     = {}
  validation {
    condition     = alltrue([for r, key in var.region_kms_key_ids : can(regex("^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]$", r)) && can(regex("^arn:aws[a-z-]*:kms:", key))])
    error_message = "The region_kms_key_ids must map AWS region names to KMS key ARNs."
  }
}

variable "subnet_id" {
  type        = string
  description = "Subnet for the build instance. With connect_via public_ip: empty (the default VPC) or a public subnet (a route to an internet gateway); the instance gets a public IP, which Packer's SSH and the package repositories need. With connect_via session_manager: a private subnet that reaches Systems Manager (VPC endpoints or NAT) and the package repositories (NAT or proxies); make ami refuses it empty (docs/ami.md)."
  default     = ""
  validation {
    condition     = var.subnet_id == "" || can(regex("^subnet-[0-9a-f]{8,17}$", var.subnet_id))
    error_message = "The subnet_id must be empty or a subnet id such as subnet-0123456789abcdef0."
  }
}

variable "nvidia_driver_version" {
  type        = string
  description = "NVIDIA driver version the image carries (pinned in versions.pkrvars.hcl)."
  validation {
    condition     = can(regex("^[0-9]{3}\\.[0-9]{2,3}(\\.[0-9]{2})?$", var.nvidia_driver_version))
    error_message = "The nvidia_driver_version must look like 580.178.04."
  }
}

variable "cuda_version" {
  type        = string
  description = "CUDA toolkit version installed on the host (pinned in versions.pkrvars.hcl)."
  validation {
    condition     = can(regex("^[0-9]{2}\\.[0-9]+\\.[0-9]+$", var.cuda_version))
    error_message = "The cuda_version must be a full CUDA toolkit version such as 13.2.0."
  }
}

variable "nvidia_container_toolkit_version" {
  type        = string
  description = "NVIDIA container toolkit version (pinned in versions.pkrvars.hcl)."
  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+$", var.nvidia_container_toolkit_version))
    error_message = "The nvidia_container_toolkit_version must look like 1.19.0."
  }
}

variable "connect_via" {
  type        = string
  description = "How Packer reaches the build instance. session_manager (recommended; docs/ami.md): SSH through an AWS Systems Manager Session Manager tunnel to an instance in a private subnet (subnet_id), with no public IP and no inbound rule; needs session-manager-plugin where Packer runs. public_ip (the default, as before): SSH to the instance's public IP from the address running Packer."
  default     = "public_ip"
  # Packer reads error_message as a literal, without variables (hashicorp/packer hcl2template/types.variables.go,
  # decodeVariableValidationBlock), so it cannot quote the bad value; Packer points at where the value was set,
  # and `make ami` names it (mk/ami.mk).
  validation {
    condition     = contains(["public_ip", "session_manager"], var.connect_via)
    error_message = "The connect_via must be session_manager (SSH through Session Manager, no public IP) or public_ip (SSH to a public IP)."
  }
}

variable "iam_instance_profile" {
  type        = string
  description = "Existing instance profile for the build instance, by name. Empty: with connect_via session_manager, Packer creates a temporary one allowing only what the SSM agent needs for Session Manager and deletes it afterwards; with public_ip, the instance gets no profile. Given: its role must allow the SSM agent (AmazonSSMManagedInstanceCore or the actions in docs/ami.md), and the user running Packer needs iam:PassRole on it."
  default     = ""
  validation {
    condition     = var.iam_instance_profile == "" || can(regex("^[\\w+=,.@-]{1,128}$", var.iam_instance_profile))
    error_message = "The iam_instance_profile must be empty or an instance profile name: 1 to 128 letters, digits and +=,.@_- (no path, no ARN)."
  }
}
