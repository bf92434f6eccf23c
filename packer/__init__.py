"""mlfleet's GPU image: the Packer build (*.pkr.hcl) and the Python tools around it.

`packer.manifest` reads the AMI ids a build recorded (for the Pulumi AMI component), `packer.ami_clean`
removes images no stack uses, `packer.ami_test` boot-tests a built image. Only `manifest` is imported by
the Pulumi program; it needs the standard library only.
"""
