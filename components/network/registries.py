"""Which registry a container image comes from, and whether a region without internet egress reaches it.

The rules live in lambdas/common/registries.py, standard library only, so the `mlfleet` command and the
functions apply the same ones to the images jobs name as the program applies to the default job image.
"""

from lambdas.common.registries import (
    DOCKER_HUB,
    ECR_PUBLIC,
    PRIVATE_ECR,
    private_registry,
    reachable_without_egress,
    registry_of,
    through_cache,
)

__all__ = ["DOCKER_HUB", "ECR_PUBLIC", "PRIVATE_ECR", "private_registry", "reachable_without_egress", "registry_of",
           "through_cache"]
