#!/usr/bin/env bash
# OS updates with the kernel held: the NVIDIA kernel modules are built for the running kernel, so a
# kernel update (now or on a running machine) must never happen behind the driver's back.
set -euo pipefail

# The SSM agent lets `make ami-test` (and Session Manager, instead of SSH) reach a machine.
dnf install -y 'dnf-command(versionlock)' amazon-ssm-agent
systemctl enable amazon-ssm-agent
dnf versionlock add 'kernel*'

# Security and bug fixes within the base image's Amazon Linux release (the base pins the release
# version, so this build is reproducible for a given base AMI).
dnf upgrade -y --refresh

# kernel is an installonly package (dnf.conf(5), installonlypkgs: packages "that should only ever be
# installed, never upgraded. Kernels in particular fall into this category"): an update installs a second
# kernel next to the running one, which stays installed, and makes it the boot default. So the running
# kernel must be the only one installed (amazon-ecs-ami scripts/al2023/gpu/install-nvidia-driver.sh
# locks 'kernel*' "to prevent automatic updates that could break DKMS modules").
installed_kernels="$(rpm -q kernel --qf '%{VERSION}-%{RELEASE}.%{ARCH}\n')"
if [[ "$installed_kernels" != "$(uname -r)" ]]; then
  echo "the running kernel $(uname -r) is not the only installed kernel (${installed_kernels//$'\n'/, }):" >&2
  echo "a kernel update slipped through" >&2
  exit 1
fi
dnf clean all
