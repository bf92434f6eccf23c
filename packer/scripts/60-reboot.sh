#!/usr/bin/env bash
# Reboot the build instance (Packer reconnects after pause_before) so the validation runs against a
# booted system: the NVIDIA module loaded at boot, sysctls applied from /etc/sysctl.d, Docker and
# containerd started with their new limits, the CloudWatch agent configured by its boot unit.
set -euo pipefail

systemctl reboot
