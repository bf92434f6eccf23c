#!/usr/bin/env bash
# The CloudWatch agent, publishing GPU utilisation and GPU memory (nvidia_gpu) with CPU, memory and disk
# into namespace CWAgent. append_dimensions + aggregation_dimensions make the agent publish, besides the
# per-GPU series, nvidia_smi_utilization_gpu with exactly {InstanceId, AutoScalingGroupName} (what the
# reaper queries for a fleet member), {AutoScalingGroupName} (what the fleet idle alarm queries) and
# {InstanceId} (what the reaper queries for a standalone machine, which has no AutoScalingGroupName).
set -euo pipefail

: "${FILES_DIR:?set by packer}"
agent_dir=/opt/aws/amazon-cloudwatch-agent

dnf install -y amazon-cloudwatch-agent
install -m 0644 "${FILES_DIR}/cloudwatch/amazon-cloudwatch-agent.json" "${agent_dir}/etc/mlfleet.json"

# Fail the build now if the agent rejects the configuration (validate.sh checks it again after boot).
"${agent_dir}/bin/config-translator" --mode ec2 --input "${agent_dir}/etc/mlfleet.json" \
  --output /tmp/mlfleet-cwagent.toml --config "${agent_dir}/etc/common-config.toml"
rm -f /tmp/mlfleet-cwagent.toml

install -m 0644 "${FILES_DIR}/systemd/mlfleet-cloudwatch-agent.service" /etc/systemd/system/
systemctl daemon-reload
systemctl enable mlfleet-cloudwatch-agent.service
