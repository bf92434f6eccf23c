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

rpm -q kernel --qf '%{VERSION}-%{RELEASE}.%{ARCH}\n' | grep -qx "$(uname -r)" || {
  echo "the running kernel $(uname -r) is not the installed kernel: a kernel update slipped through" >&2
  exit 1
}
dnf clean all
