"""mlfleet's CrossGuard policy pack: `pulumi preview --policy-pack policy` (or `make policy-preview`)."""

from pulumi_policy import EnforcementLevel, PolicyPack

from pack import POLICIES

PolicyPack(name="mlfleet", policies=POLICIES, enforcement_level=EnforcementLevel.MANDATORY)
