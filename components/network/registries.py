"""Which registry a container image comes from, and whether a region without internet egress reaches it.

A region without egress reaches exactly two kinds of registry: its own private ECR (the ecr.api and
ecr.dkr endpoints resolve only that region's `<account>.dkr.ecr.<region>.amazonaws.com`), and ECR
Public through the region's pull-through cache (image_cache.py), which ECR itself fills from
public.ecr.aws. Docker Hub, ghcr.io, nvcr.io, another region's ECR: unreachable.
"""

from __future__ import annotations

import re

DOCKER_HUB = "docker.io"
ECR_PUBLIC = "public.ecr.aws"
PRIVATE_ECR = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr(-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com$")


def registry_of(image: str) -> str:
    """The registry host of an image reference, by Docker's rule (github.com/distribution/reference,
    normalize.go, splitDockerDomain): the first path component names a registry when it contains a
    '.' or ':', is 'localhost', or has upper-case letters; otherwise the image is on Docker Hub."""
    first, slash, _ = image.partition("/")
    if not slash or (not any(c in first for c in ".:") and first != "localhost" and first.lower() == first):
        return DOCKER_HUB
    return DOCKER_HUB if first == "index.docker.io" else first


def reachable_without_egress(image: str, region: str) -> bool:
    """True when instances of `region` pull `image` with no internet egress: ECR Public (through the
    region's pull-through cache) or the region's own private ECR."""
    registry = registry_of(image)
    private = PRIVATE_ECR.match(registry)
    return registry == ECR_PUBLIC or bool(private and private["region"] == region)


def through_cache(image: str, private_registry: str, prefix: str) -> str:
    """An ECR Public image as pulled through the pull-through cache rule `prefix` of `private_registry`
    (`public.ecr.aws/nvidia/cuda:12` -> `<account>.dkr.ecr.<region>.amazonaws.com/<prefix>/nvidia/cuda:12`,
    https://docs.aws.amazon.com/AmazonECR/latest/userguide/pull-through-cache-working.html).
    Images of other registries are returned unchanged."""
    if registry_of(image) != ECR_PUBLIC:
        return image
    return f"{private_registry}/{prefix}/{image.split('/', 1)[1]}"
