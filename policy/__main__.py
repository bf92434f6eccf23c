"""mlfleet's CrossGuard policy pack: `pulumi preview --policy-pack policy`, run by `make preview` and `make up`."""

from pulumi_policy import EnforcementLevel, PolicyPack

from pack import POLICIES

PolicyPack(name="mlfleet", policies=POLICIES, enforcement_level=EnforcementLevel.MANDATORY)
