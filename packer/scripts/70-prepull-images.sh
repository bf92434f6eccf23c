#!/usr/bin/env bash
# Pre-pull ML base images into Docker's image store so jobs start without a multi-gigabyte pull
# (ECS_IMAGE_PULL_BEHAVIOR=prefer-cached in the fleet's boot script uses them). The build instance has
# no AWS credentials, so the images must be public (public.ecr.aws, Docker Hub, nvcr.io public images).
set -euo pipefail

read -r -a images <<< "${PREPULL_IMAGES:-}"
if ((${#images[@]} == 0)); then
  echo "prepull_images is empty: nothing to pull"
  exit 0
fi

systemctl start docker
for image in "${images[@]}"; do
  echo "pulling ${image}"
  docker pull --quiet "$image"
done
docker image ls
