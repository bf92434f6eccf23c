"""mlfleet: cheap, safe GPU capacity on AWS. `pulumi up -s <env>` runs this with stacks/Pulumi.<env>.yaml."""

from components.config import load_stack_config
from components.program import deploy

# Validation first: a bad value stops the preview here, before any resource is declared.
deploy(load_stack_config())
