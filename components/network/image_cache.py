"""A region's ECR pull-through cache for ECR Public: job images that need no internet egress.

Instances reach only their own region's ECR (registries.py), so ECR Public images are pulled as
`<account>.dkr.ecr.<region>.amazonaws.com/mlfleet/<env>/<repository>:<tag>`. On the first pull ECR
creates the repository (with the creation template's settings) and fetches the image from
public.ecr.aws itself; ECR Public needs no credentials. Later pulls come from the cache, which ECR
refreshes from upstream at most once a day.
https://docs.aws.amazon.com/AmazonECR/latest/userguide/pull-through-cache.html

The repositories ECR creates are not Pulumi resources: `pulumi destroy` removes the rule and the
template but leaves them. The lifecycle policy below expires every cached image 30 days after it was
cached, so what is left after a destroy empties itself (an empty repository costs nothing).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.resources import assume_role_policy, child, invoke

from .registries import ECR_PUBLIC, private_registry, through_cache

# Days a cached image stays before ECR expires it (a later pull caches it again).
CACHED_IMAGE_DAYS = 30

# The image-pulling principal needs these on the cached repositories, besides the usual pull permissions:
# BatchImportUpstreamImage to fetch from upstream, CreateRepository for the first pull of a repository,
# TagResource because the creation template tags the repositories it creates.
# https://docs.aws.amazon.com/AmazonECR/latest/userguide/pull-through-cache-iam.html
PULL_THROUGH_ACTIONS = ("ecr:BatchImportUpstreamImage", "ecr:CreateRepository", "ecr:TagResource")


def cache_prefix(environment: str) -> str:
    """The repository prefix of an environment's cache. One per environment, so two stacks in one
    account and region each own their rule (ECR allows one rule per prefix)."""
    return f"mlfleet/{environment}"


def lifecycle_policy() -> str:
    """Superseded (untagged) digests go after a day, every cached image after CACHED_IMAGE_DAYS. ECR
    evaluates the `any` rule last, so it must have the highest priority.
    https://docs.aws.amazon.com/AmazonECR/latest/userguide/LifecyclePolicies.html"""
    rules = [
        {"rulePriority": 1, "description": "superseded digests",
         "selection": {"tagStatus": "untagged", "countType": "sinceImagePushed", "countUnit": "days", "countNumber": 1},
         "action": {"type": "expire"}},
        {"rulePriority": 2, "description": f"cached images after {CACHED_IMAGE_DAYS} days (a pull caches them again)",
         "selection": {"tagStatus": "any", "countType": "sinceImagePushed", "countUnit": "days",
                       "countNumber": CACHED_IMAGE_DAYS},
         "action": {"type": "expire"}},
    ]
    return json.dumps({"rules": rules}, sort_keys=True)


@dataclass(frozen=True)
class ImageCacheArgs:
    region: str
    environment: str
    tags: Mapping[str, str]


class ImageCache(pulumi.ComponentResource):
    registry: pulumi.Output[str]  # <account>.dkr.ecr.<region>.amazonaws.com
    repositories_arn: pulumi.Output[str]  # ARN pattern of the repositories the cache creates

    def __init__(self, name: str, args: ImageCacheArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:network:ImageCache", name, None, opts)
        self.prefix = cache_prefix(args.environment)
        tags = dict(args.tags)
        account = aws.get_caller_identity_output(opts=invoke(self)).account_id

        aws.ecr.PullThroughCacheRule(
            f"{name}-ecr-public",
            ecr_repository_prefix=self.prefix,
            upstream_registry_url=ECR_PUBLIC,
            opts=child(self),
        )
        # ECR assumes this role to create and tag the cached repositories: a creation template that tags
        # needs one. https://docs.aws.amazon.com/AmazonECR/latest/userguide/repository-creation-templates-create-iam.html
        self.repositories_arn = pulumi.Output.concat(
            "arn:aws:ecr:", args.region, ":", account, ":repository/", self.prefix, "/*"
        )
        # "-ecr-templates": at the longest environment and region names, `<name>-repository-creation`
        # plus Pulumi's random suffix would pass IAM's 64-character role-name limit (tests/rules/api_models.py).
        # The trust policy is AWS's documented one, without aws:SourceAccount: the ECR guide does not say that
        # ECR sends it when it assumes the role, and a condition it does not send would break every cached pull.
        # https://docs.aws.amazon.com/AmazonECR/latest/userguide/repository-creation-templates-create-iam.html
        role = aws.iam.Role(
            f"{name}-ecr-templates",
            assume_role_policy=assume_role_policy("ecr.amazonaws.com"),
            description=f"ECR creates and tags the {self.prefix} cache repositories in {args.region}",
            force_detach_policies=True,
            tags=tags,
            opts=child(self),
        )
        aws.iam.RolePolicy(
            f"{name}-ecr-templates",
            role=role.id,
            policy=self.repositories_arn.apply(lambda arn: json.dumps({
                "Version": "2012-10-17",
                "Statement": [{"Sid": "CreateCacheRepositories", "Effect": "Allow",
                               "Action": ["ecr:CreateRepository", "ecr:TagResource"], "Resource": arn}],
            })),
            opts=child(self),
        )
        aws.ecr.RepositoryCreationTemplate(
            f"{name}-ecr-public",
            prefix=self.prefix,
            applied_fors=["PULL_THROUGH_CACHE"],
            description=f"mlfleet {args.environment}: ECR Public images cached for the GPU fleets",
            encryption_configurations=[{"encryption_type": "AES256"}],
            # The cache refreshes a tag when upstream moves it, so tags must stay mutable.
            image_tag_mutability="MUTABLE",
            lifecycle_policy=lifecycle_policy(),
            resource_tags=tags,
            custom_role_arn=role.arn,
            opts=child(self),
        )

        self.registry = account.apply(lambda a: private_registry(a, args.region))
        self.register_outputs({"registry": self.registry, "prefix": self.prefix})

    def image(self, image: str) -> pulumi.Output[str]:
        """`image` as the region's instances pull it: ECR Public images through this cache, others as given."""
        return self.registry.apply(lambda registry: through_cache(image, registry, self.prefix))
