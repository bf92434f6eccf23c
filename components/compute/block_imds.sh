#!/bin/bash
# Keep bridge-mode job containers off the instance metadata service: they get AWS credentials from
# their task role, never from the instance profile. The rule AWS documents for bridge networking
# (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-iam-roles.html, "Additional
# configuration for Amazon EC2 instances"), kept in DOCKER-USER, the chain Docker processes before its
# own (https://docs.docker.com/engine/network/firewall-iptables/) and never deletes or modifies rules
# of (moby/libnetwork firewall_linux.go, arrangeUserFilterRule).
# iptables rules live in memory only: mlfleet-block-imds.service runs this at every boot, before Docker;
# it is idempotent (the rule is inserted only when it is missing).
set -euo pipefail

rule=(-i 'docker+' -d 169.254.169.254/32 -j DROP)

# Created before Docker starts (at boot): Docker keeps the rules it finds and adds the jump from FORWARD.
iptables -w -n -L DOCKER-USER > /dev/null 2>&1 || iptables -w -N DOCKER-USER
iptables -w -C DOCKER-USER "${rule[@]}" 2> /dev/null || iptables -w -I DOCKER-USER 1 "${rule[@]}"
