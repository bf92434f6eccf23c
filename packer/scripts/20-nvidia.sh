#!/usr/bin/env bash
# NVIDIA driver, CUDA toolkit and NVIDIA container toolkit at the versions pinned in
# packer/versions.pkrvars.hcl, then locked so `dnf upgrade` on a running machine cannot move them.
#
# The Amazon ECS GPU base image ships the driver with kernel modules prebuilt for its locked kernel and
# picks the right module variant at boot (nvidia-kmod-load.service). Replacing that driver in place would
# leave the boot loader holding the old modules, so the driver is checked, not swapped: a base carrying
# another driver fails here, early and clearly, before the long steps. The user-space pieces
# (CUDA toolkit, container toolkit) are installed at exactly the pinned versions.
set -euo pipefail

: "${NVIDIA_DRIVER_VERSION:?set by packer from versions.pkrvars.hcl}"
: "${CUDA_VERSION:?set by packer from versions.pkrvars.hcl}"
: "${NVIDIA_CONTAINER_TOOLKIT_VERSION:?set by packer from versions.pkrvars.hcl}"

cuda_series="${CUDA_VERSION%.*}"                 # 13.2.0 -> 13.2
cuda_package="cuda-toolkit-${cuda_series//./-}"  # -> cuda-toolkit-13-2

installed_driver="$(rpm -q --qf '%{VERSION}' nvidia-driver || true)"
if [[ "$installed_driver" != "$NVIDIA_DRIVER_VERSION" ]]; then
  echo "the base AMI carries NVIDIA driver '${installed_driver}', versions.pkrvars.hcl pins ${NVIDIA_DRIVER_VERSION}:" >&2
  echo "use an Amazon ECS GPU-optimized AL2023 base with that driver (its release notes list it; pin it with" >&2
  echo "base_ami_id) or pin the driver the newest base carries" >&2
  exit 1
fi

# The base locks nvidia*, libnvidia* and kmod*; drop the container toolkit's locks so the exact versions
# below can be installed (upgrade or downgrade), then lock the result.
mapfile -t toolkit_locks < <(dnf versionlock list | grep -E '^(nvidia-container-toolkit|libnvidia-container)' || true)
if ((${#toolkit_locks[@]})); then
  dnf versionlock delete "${toolkit_locks[@]}"
fi
dnf install -y --allowerasing \
  "nvidia-container-toolkit-${NVIDIA_CONTAINER_TOOLKIT_VERSION}" \
  "nvidia-container-toolkit-base-${NVIDIA_CONTAINER_TOOLKIT_VERSION}" \
  "libnvidia-container-tools-${NVIDIA_CONTAINER_TOOLKIT_VERSION}" \
  "libnvidia-container1-${NVIDIA_CONTAINER_TOOLKIT_VERSION}" \
  "${cuda_package}-${CUDA_VERSION}"

dnf versionlock add 'nvidia*' 'libnvidia*' 'cuda-*'

# CUDA on every login shell's PATH (the toolkit installs under /usr/local/cuda-<series>).
cat > /etc/profile.d/mlfleet-cuda.sh <<PROFILE
export PATH="/usr/local/cuda-${cuda_series}/bin:\${PATH}"
PROFILE

# What the image was built with, for anyone logged in to a machine.
install -d -m 0755 /etc/mlfleet
cat > /etc/mlfleet/image-versions <<VERSIONS
NVIDIA_DRIVER_VERSION=${NVIDIA_DRIVER_VERSION}
CUDA_VERSION=${CUDA_VERSION}
NVIDIA_CONTAINER_TOOLKIT_VERSION=${NVIDIA_CONTAINER_TOOLKIT_VERSION}
VERSIONS
dnf clean all
