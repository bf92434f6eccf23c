#!/usr/bin/env bash
# Checks a booted mlfleet GPU image, on the build instance (last step before clean-up) or on a test
# instance (`make ami-test` sends this script through SSM). Every check runs; the script lists each
# result and exits non-zero if any failed, which fails the Packer build.
set -euo pipefail

: "${NVIDIA_DRIVER_VERSION:?expected NVIDIA driver version}"
: "${CUDA_VERSION:?expected CUDA toolkit version}"
: "${NVIDIA_CONTAINER_TOOLKIT_VERSION:?expected NVIDIA container toolkit version}"
: "${OPEN_FILES_LIMIT:?expected open-file limit}"
: "${LOGIN_USER:=ec2-user}"
: "${PREPULL_IMAGES:=}"

failures=0
check() {
  local description="$1"
  shift
  local output
  if output="$("$@" 2>&1)"; then
    echo "PASS ${description}"
  else
    echo "FAIL ${description}: ${output}"
    failures=$((failures + 1))
  fi
}

equals() {  # equals WHAT ACTUAL EXPECTED
  [[ "$2" == "$3" ]] || { echo "$1 is '$2', expected '$3'"; return 1; }
}

driver_matches() {
  local versions
  versions="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader)"
  [[ -n "$versions" ]] || { echo "nvidia-smi lists no GPU"; return 1; }
  while read -r version; do
    equals "loaded driver" "$version" "$NVIDIA_DRIVER_VERSION" || return 1
  done <<< "$versions"
}

package_version() { rpm -q --qf '%{VERSION}' "$1"; }

cuda_matches() {
  local series="${CUDA_VERSION%.*}"
  equals "cuda-toolkit-${series//./-}" "$(package_version "cuda-toolkit-${series//./-}")" "$CUDA_VERSION" &&
    "/usr/local/cuda-${series}/bin/nvcc" --version | grep -q "release ${series}"
}

versions_locked() {
  local locks
  locks="$(dnf versionlock list)"
  for prefix in kernel nvidia-driver nvidia-container-toolkit cuda-toolkit; do
    grep -q "^${prefix}-" <<< "$locks" || { echo "no dnf versionlock for ${prefix}"; return 1; }
  done
}

ecs_defaults() {
  grep -qx 'ECS_ENABLE_GPU_SUPPORT=true' /var/lib/ecs/ecs.config &&
    grep -qx 'ECS_ENABLE_SPOT_INSTANCE_DRAINING=true' /var/lib/ecs/ecs.config
}

docker_nvidia_runtime() {
  systemctl start docker
  docker info --format '{{json .Runtimes}}' | grep -q '"nvidia"'
}

login_user_limit() {
  equals "soft nofile of ${LOGIN_USER}" "$(su -l "$LOGIN_USER" -s /bin/bash -c 'ulimit -Sn')" "$OPEN_FILES_LIMIT" &&
    equals "hard nofile of ${LOGIN_USER}" "$(su -l "$LOGIN_USER" -s /bin/bash -c 'ulimit -Hn')" "$OPEN_FILES_LIMIT"
}

daemon_limit() {  # the limit the running daemon process has, not only what its unit says
  local unit="$1" pid
  pid="$(systemctl show "$unit" -p MainPID --value)"
  [[ "$pid" != 0 ]] || { echo "${unit} is not running"; return 1; }
  equals "${unit} open files" "$(awk '/^Max open files/ {print $4}' "/proc/${pid}/limits")" "$OPEN_FILES_LIMIT"
}

docker_default_ulimit() {
  equals "daemon.json default-ulimits nofile" \
    "$(jq -r '."default-ulimits".nofile | "\(.Soft):\(.Hard)"' /etc/docker/daemon.json)" \
    "${OPEN_FILES_LIMIT}:${OPEN_FILES_LIMIT}"
}

sysctls_in_effect() {
  local key value actual status=0
  while IFS='=' read -r key value; do
    key="$(xargs <<< "$key")"
    [[ -z "$key" || "$key" == \#* ]] && continue
    value="$(xargs <<< "$value")"
    actual="$(sysctl -n "$key" | xargs)"
    equals "$key" "$actual" "$value" || status=1
  done < /etc/sysctl.d/90-mlfleet-network.conf
  return "$status"
}

cloudwatch_config_valid() {
  local agent_dir=/opt/aws/amazon-cloudwatch-agent
  "${agent_dir}/bin/config-translator" --mode ec2 --input "${agent_dir}/etc/mlfleet.json" \
    --output /tmp/validate-cwagent.toml --config "${agent_dir}/etc/common-config.toml" > /dev/null &&
    rm -f /tmp/validate-cwagent.toml &&
    systemctl is-active --quiet mlfleet-cloudwatch-agent.service
}

# The first ECS agent that shares GPUs through NVIDIA MPS (github.com/aws/amazon-ecs-agent release v1.107.0:
# "Add MPS GPU Sharing capability"). ecs-init's package version is the agent's.
readonly MPS_AGENT_MIN_VERSION=1.107.0

gpu_sharing_ready() {  # what the agent checks before it advertises ecs.capability.gpu-sharing-mps
  local agent
  agent="$(rpm -q --qf '%{VERSION}' ecs-init)"
  [[ "$(printf '%s\n%s\n' "$MPS_AGENT_MIN_VERSION" "$agent" | sort -V | head -n 1)" == "$MPS_AGENT_MIN_VERSION" ]] ||
    { echo "ECS agent ${agent} is older than ${MPS_AGENT_MIN_VERSION}"; return 1; }
  [[ -x /usr/bin/nvidia-cuda-mps-control ]] || { echo "no /usr/bin/nvidia-cuda-mps-control"; return 1; }
  equals "nvidia-mps.service" "$(systemctl is-enabled nvidia-mps.service)" enabled &&
    systemctl is-active --quiet nvidia-mps.service
}

images_present() {
  local image
  for image in $PREPULL_IMAGES; do
    docker image inspect "$image" > /dev/null || return 1
  done
}

check "nvidia-smi runs and every GPU uses driver ${NVIDIA_DRIVER_VERSION}" driver_matches
check "CUDA toolkit ${CUDA_VERSION}" cuda_matches
check "nvidia-container-toolkit ${NVIDIA_CONTAINER_TOOLKIT_VERSION}" \
  equals nvidia-container-toolkit "$(package_version nvidia-container-toolkit)" "$NVIDIA_CONTAINER_TOOLKIT_VERSION"
check "kernel, driver, toolkit and CUDA are version-locked" versions_locked
check "ECS agent defaults: GPU support and spot draining" ecs_defaults
check "Docker has the nvidia runtime" docker_nvidia_runtime
check "${LOGIN_USER} login shell gets nofile ${OPEN_FILES_LIMIT}" login_user_limit
check "dockerd runs with nofile ${OPEN_FILES_LIMIT}" daemon_limit docker
check "containerd runs with nofile ${OPEN_FILES_LIMIT}" daemon_limit containerd
check "containers default to nofile ${OPEN_FILES_LIMIT}" docker_default_ulimit
check "network sysctls from /etc/sysctl.d/90-mlfleet-network.conf are in effect" sysctls_in_effect
check "CloudWatch agent configuration translates and the agent was configured at boot" cloudwatch_config_valid
check "GPU sharing: ECS agent >= ${MPS_AGENT_MIN_VERSION}, MPS control daemon enabled and running" gpu_sharing_ready
check "pre-pulled images are present" images_present
check "SSM agent starts at boot" systemctl is-enabled --quiet amazon-ssm-agent.service

if ((failures > 0)); then
  echo "${failures} check(s) failed"
  exit 1
fi
echo "all checks passed"
