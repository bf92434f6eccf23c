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

  # SSH reaches the short-lived build instance only from the address running Packer, through a
  # temporary security group and key pair that Packer deletes at the end. Fleet instances never get a
  # public IP; this build instance has one, in any subnet: the builder connects to it by its public address
  # only (ssh_interface "public_ip": packer-plugin-amazon builder/common/ssh.go, SSHHost), and it reaches
  # the package repositories through it.
  ssh_username                              = "ec2-user"
  ssh_interface                             = "public_ip"
  associate_public_ip_address               = true
  temporary_security_group_source_public_ip = true
  temporary_key_pair_type                   = "ed25519"
  ssh_clear_authorized_keys                 = true
  shutdown_behavior                         = "terminate"

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
