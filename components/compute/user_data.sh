#!/bin/bash
# Boot script of an mlfleet GPU instance: join the ECS cluster with GPU support and spot draining.
# Placeholders between double at-signs are filled in by components/compute/fleet.py.
set -euo pipefail

cat >> /etc/ecs/ecs.config <<'ECSCONFIG'
ECS_CLUSTER=@@CLUSTER_NAME@@
ECS_ENABLE_GPU_SUPPORT=true
ECS_ENABLE_SPOT_INSTANCE_DRAINING=true
ECS_RESERVED_MEMORY=@@RESERVED_MEMORY_MIB@@
ECS_CONTAINER_STOP_TIMEOUT=110s
ECS_ENABLE_TASK_IAM_ROLE=true
ECS_AWSVPC_BLOCK_IMDS=true
ECS_IMAGE_PULL_BEHAVIOR=prefer-cached
ECS_CONTAINER_INSTANCE_PROPAGATE_TAGS_FROM=ec2_instance
ECS_INSTANCE_ATTRIBUTES={"mlfleet.fleet":"@@FLEET@@","mlfleet.environment":"@@ENVIRONMENT@@"}
ECSCONFIG

# Job containers run in bridge mode and get AWS credentials from their task role, never from the
# instance profile: drop their traffic to the instance metadata service. User data runs once and
# iptables rules do not survive a reboot, so a unit applies the rule at every boot, before Docker
# (components/compute/block_imds.sh and mlfleet-block-imds.service, filled in by fleet.py).
install -d -m 0755 /usr/local/sbin
cat > /usr/local/sbin/mlfleet-block-imds <<'BLOCKIMDS'
@@BLOCK_IMDS_SCRIPT@@
BLOCKIMDS
chmod 0755 /usr/local/sbin/mlfleet-block-imds
cat > /etc/systemd/system/mlfleet-block-imds.service <<'UNIT'
@@BLOCK_IMDS_UNIT@@
UNIT
systemctl daemon-reload
# Enabled for every boot, and run now: Docker may already be up, and no container runs before the ECS
# agent starts, which waits for this script (cloud-final).
systemctl enable --now mlfleet-block-imds.service
