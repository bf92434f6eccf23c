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
# instance profile: drop their traffic to the instance metadata service. Docker keeps rules in
# DOCKER-USER, and creating the chain before Docker starts is supported.
iptables -N DOCKER-USER 2>/dev/null || true
iptables -I DOCKER-USER 1 -i docker+ -d 169.254.169.254/32 -j DROP
