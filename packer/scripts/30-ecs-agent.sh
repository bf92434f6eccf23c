#!/usr/bin/env bash
# ECS agent defaults baked into the image: GPU support and spot-instance draining.
#
# ecs-init reads /var/lib/ecs/ecs.config first and /etc/ecs/ecs.config second (the later file wins), and
# the ECS GPU-optimized AMI keeps its image defaults in the first one. The fleet's boot script
# (components/compute/user_data.sh) sets the same two values again in /etc/ecs/ecs.config, so an
# instance behaves the same whichever AMI it boots; here they also cover a machine started by hand.
set -euo pipefail

defaults=/var/lib/ecs/ecs.config
install -d -m 0755 /var/lib/ecs
touch "$defaults"

set_default() {
  local key="$1" value="$2"
  sed -i "/^${key}=/d" "$defaults"
  echo "${key}=${value}" >> "$defaults"
}

set_default ECS_ENABLE_GPU_SUPPORT true
set_default ECS_ENABLE_SPOT_INSTANCE_DRAINING true

# The ECS agent starts GPU containers through Docker's "nvidia" runtime; the GPU base image registers it
# in /etc/docker-runtimes.d. A base without it (plain AL2023) gets it from the container toolkit.
if [[ ! -x /etc/docker-runtimes.d/nvidia ]]; then
  nvidia-ctk runtime configure --runtime=docker
fi
