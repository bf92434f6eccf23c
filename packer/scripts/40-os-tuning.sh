#!/usr/bin/env bash
# OS tuning for ML jobs: open-file limits for every user and for the container runtime, and network
# buffers sized for multi-gigabyte downloads (datasets, checkpoints, container layers).
set -euo pipefail

: "${OPEN_FILES_LIMIT:?set by packer (open_files_limit)}"
: "${FILES_DIR:?set by packer}"

# 1. Every login user (pam_limits). "*" does not cover root, so root is listed too.
cat > /etc/security/limits.d/90-mlfleet-nofile.conf <<LIMITS
# mlfleet: data loaders open thousands of files; the default 1024 makes them fail.
*    soft nofile ${OPEN_FILES_LIMIT}
*    hard nofile ${OPEN_FILES_LIMIT}
root soft nofile ${OPEN_FILES_LIMIT}
root hard nofile ${OPEN_FILES_LIMIT}
LIMITS

# 2. The daemons themselves (systemd ignores limits.d).
for unit in docker containerd; do
  install -d -m 0755 "/etc/systemd/system/${unit}.service.d"
  cat > "/etc/systemd/system/${unit}.service.d/90-mlfleet-nofile.conf" <<DROPIN
[Service]
LimitNOFILE=${OPEN_FILES_LIMIT}
DROPIN
done

# 3. Containers: Docker's default-ulimits (ECS task definitions can still lower or raise it per task).
# Amazon Linux's Docker package can pass --default-ulimit in /etc/sysconfig/docker; Docker refuses to
# start when a setting is both a flag and in daemon.json, so any such flag goes and daemon.json holds the
# one value. (fs.file-max stays the kernel's, sized from memory: a fixed value could lower it on big machines.)
if [[ -f /etc/sysconfig/docker ]]; then
  sed -i -E 's/[[:space:]]*--default-ulimit[= ]nofile=[0-9]+:[0-9]+//g' /etc/sysconfig/docker
fi
dnf install -y jq
install -d -m 0755 /etc/docker
daemon_json=/etc/docker/daemon.json
[[ -s "$daemon_json" ]] || echo '{}' > "$daemon_json"
jq --argjson limit "$OPEN_FILES_LIMIT" \
  '."default-ulimits".nofile = {"Name": "nofile", "Soft": $limit, "Hard": $limit}' \
  "$daemon_json" > "${daemon_json}.new"
mv "${daemon_json}.new" "$daemon_json"

# 4. Network buffers and congestion control (values and reasons in the file).
install -m 0644 "${FILES_DIR}/sysctl/90-mlfleet-network.conf" /etc/sysctl.d/90-mlfleet-network.conf
install -m 0644 "${FILES_DIR}/modules-load/mlfleet-bbr.conf" /etc/modules-load.d/mlfleet-bbr.conf
modprobe tcp_bbr
sysctl --system > /dev/null

systemctl daemon-reload
