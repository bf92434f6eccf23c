"""Pulumi components of mlfleet, one folder per concept. `program.deploy` composes them."""
