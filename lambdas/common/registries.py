"""Which registry a container image comes from, and whether a region without internet egress reaches it.

A region without egress reaches exactly two kinds of registry: its own private ECR (the ecr.api and
ecr.dkr endpoints resolve only that region's `<account>.dkr.ecr.<region>.amazonaws.com`), and ECR
Public through the region's pull-through cache (components/network/image_cache.py), which ECR itself
fills from public.ecr.aws. Docker Hub, ghcr.io, nvcr.io, another region's ECR: unreachable.

Standard library only: the Pulumi program (the default job image), the `mlfleet` command and the
functions (the images jobs name) share these rules.
"""

from __future__ import annotations

import re

DOCKER_HUB = "docker.io"
ECR_PUBLIC = "public.ecr.aws"
PRIVATE_ECR = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr(-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com$")

# The image reference grammar of github.com/distribution/reference (reference.go's grammar, regexp.go's
# expressions), which Docker and containerd parse references with:
#   reference := name [ ":" tag ] [ "@" digest ];  name := [domain "/"] remote-name
# A repository path is lower case and at most RepositoryNameTotalLengthMax (255) characters.
_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = _ALPHANUMERIC + f"(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[(?:[a-fA-F0-9:]+)\])"
_DOMAIN = _HOST + r"(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
                        rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?", re.ASCII)
REPOSITORY_NAME_MAX = 255


def reference_problem(image: str) -> str | None:
    """Why `image` is not an image reference Docker could pull (None when it is one).

    Follows distribution/reference's Parse: the whole reference must match the grammar; a reference that
    would match once lower-cased has upper case in its repository name; the path has at most 255 characters.
    """
    if not isinstance(image, str) or not image:
        return "must be a container image reference such as ghcr.io/team/train:3"
    match = _REFERENCE.fullmatch(image)
    if match is None:
        if image.lower() != image and _REFERENCE.fullmatch(image.lower()):
            return "the repository name must be lower case"
        return ("not an image reference ([registry/]repository[:tag][@digest], the grammar of "
                "github.com/distribution/reference)")
    if len(match["path"]) > REPOSITORY_NAME_MAX:
        return f"the repository path has {len(match['path'])} characters, more than {REPOSITORY_NAME_MAX}"
    return None


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


def private_registry(account: str, region: str) -> str:
    """An account's private ECR registry in `region`, where the region's pull-through cache serves images."""
    return f"{account}.dkr.ecr.{region}.amazonaws.com"


def through_cache(image: str, private_registry: str, prefix: str) -> str:
    """An ECR Public image as pulled through the pull-through cache rule `prefix` of `private_registry`
    (`public.ecr.aws/nvidia/cuda:12` -> `<account>.dkr.ecr.<region>.amazonaws.com/<prefix>/nvidia/cuda:12`,
    https://docs.aws.amazon.com/AmazonECR/latest/userguide/pull-through-cache-working.html).
    Images of other registries are returned unchanged."""
    if registry_of(image) != ECR_PUBLIC:
        return image
    return f"{private_registry}/{prefix}/{image.split('/', 1)[1]}"
