#!/usr/bin/env bash
# Last step before the snapshot: nothing from the build instance may end up on the fleet's machines
# (host keys shared by every instance, a machine-id shared by every instance, build logs, agent state).
# Ends by checking its own work, so a leftover fails the build instead of shipping.
set -euo pipefail

: "${FILES_DIR:?set by packer}"

# Services that wrote state while the build instance ran.
systemctl stop amazon-cloudwatch-agent.service ecs.service amazon-ssm-agent.service
agent_dir=/opt/aws/amazon-cloudwatch-agent
rm -f "${agent_dir}/etc/amazon-cloudwatch-agent.toml" "${agent_dir}/etc/amazon-cloudwatch-agent.json"
rm -rf "${agent_dir}/etc/amazon-cloudwatch-agent.d" "${agent_dir}/logs/"*
rm -rf /var/lib/ecs/data/* /var/log/ecs/*
# The build instance's GPUs (UUIDs, driver, MPS facts), which ecs-init saves at every start with
# ECS_ENABLE_GPU_SUPPORT=true. It rewrites the file only when it finds /dev/nvidia* (amazon-ecs-agent,
# ecs-init/gpu/nvidia_gpu_manager.go Setup returns on ErrNoGPUDeviceFound before SaveGPUState), and the
# agent registers whatever the file holds whenever it exists (agent/gpu/nvidia_gpu_manager.go Initialize).
rm -f /var/lib/ecs/gpu/nvidia-gpu-info.json

dnf clean all
rm -rf /var/cache/dnf/* "$FILES_DIR" /tmp/* /var/tmp/*

# SSH host keys (regenerated at first boot) and any authorized key left by the build.
rm -f /etc/ssh/ssh_host_*
rm -f /root/.ssh/authorized_keys /home/*/.ssh/authorized_keys

# cloud-init state, so the first boot of each instance runs its user data as a first boot.
cloud-init clean --logs --seed

# Logs: truncate files (services keep their handles), drop rotated copies and the journal.
find /var/log -type f \( -name '*.gz' -o -name '*.[0-9]' -o -name '*-[0-9]*' \) -delete
find /var/log -type f -exec truncate --size 0 {} +
rm -rf /var/log/journal/*

# machine-id: empty (not missing), so systemd generates a fresh one on first boot.
truncate --size 0 /etc/machine-id
rm -f /var/lib/dbus/machine-id

# The checks the issue asks for: no host keys, machine-id empty, logs empty.
shopt -s nullglob
leftover_keys=(/etc/ssh/ssh_host_*)
if ((${#leftover_keys[@]})); then
  echo "SSH host keys remain: ${leftover_keys[*]}" >&2
  exit 1
fi
if [[ -s /etc/machine-id ]]; then
  echo "/etc/machine-id is not empty" >&2
  exit 1
fi
# Logs that carry the build's own history (auditd keeps writing while the script runs, so the whole
# of /var/log cannot be expected to stay empty until the snapshot).
for log in /var/log/cloud-init.log /var/log/cloud-init-output.log /var/log/dnf*.log /var/log/amazon/ssm/*.log; do
  if [[ -s "$log" ]]; then
    echo "log file not truncated: ${log}" >&2
    exit 1
  fi
done
if [[ -e /var/lib/ecs/gpu/nvidia-gpu-info.json ]]; then
  echo "the build instance's GPU inventory remains: /var/lib/ecs/gpu/nvidia-gpu-info.json" >&2
  exit 1
fi
journal_files=(/var/log/journal/*)
if ((${#journal_files[@]})); then
  echo "journal not removed: ${journal_files[*]}" >&2
  exit 1
fi
echo "clean: no SSH host keys, empty machine-id, empty logs, no GPU inventory"
