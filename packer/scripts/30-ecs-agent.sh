#!/usr/bin/env bash
# ECS agent defaults baked into the image: GPU support and spot-instance draining.
#
# ecs-init reads /var/lib/ecs/ecs.config first and /etc/ecs/ecs.config second (the later file wins), and
# the ECS GPU-optimized AMI keeps its image defaults in the first one. The fleet's boot script
# (components/compute/user_data.sh) sets the same two values again in /etc/ecs/ecs.config, so an
# instance behaves the same whichever AMI it boots; here they also cover a machine started by hand.
set -euo pipefail

: "${FILES_DIR:?set by packer}"
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

# GPU sharing (jobs asking for GPU memory: ECS's nvidiaMps strategy). The agent advertises
# ecs.capability.gpu-sharing-mps when the MPS control binary exists and nvidia-mps.service is enabled, on a
# GPU that is not a vGPU slice (amazon-ecs-agent, ecs-agent/utils/gpu ShouldAdvertiseMpsCapability). Newer
# ECS GPU base images ship the unit; an older base gets the same unit from packer/files.
if [[ ! -x /usr/bin/nvidia-cuda-mps-control ]]; then
  echo "the base image has no /usr/bin/nvidia-cuda-mps-control (NVIDIA's MPS control daemon): jobs could not" >&2
  echo "share GPUs; use an Amazon ECS GPU-optimized AL2023 base whose driver packages ship it" >&2
  exit 1
fi
if ! systemctl cat nvidia-mps.service > /dev/null 2>&1; then
  install -m 0644 "${FILES_DIR}/systemd/nvidia-mps.service" /etc/systemd/system/
  systemctl daemon-reload
fi
systemctl enable nvidia-mps.service
