"""AWS commercial regions mlfleet can deploy to (validated before anything is declared).

A region missing here fails validation with its name in the message; add it when AWS opens one.
"""

AWS_REGIONS = frozenset(
    {
        "af-south-1", "ap-east-1", "ap-east-2", "ap-northeast-1", "ap-northeast-2", "ap-northeast-3",
        "ap-south-1", "ap-south-2", "ap-southeast-1", "ap-southeast-2", "ap-southeast-3",
        "ap-southeast-4", "ap-southeast-5", "ap-southeast-7", "ca-central-1", "ca-west-1",
        "eu-central-1", "eu-central-2", "eu-north-1", "eu-south-1", "eu-south-2", "eu-west-1",
        "eu-west-2", "eu-west-3", "il-central-1", "me-central-1", "me-south-1", "mx-central-1",
        "sa-east-1", "us-east-1", "us-east-2", "us-west-1", "us-west-2",
    }
)

# The only region with the AWS/Billing EstimatedCharges metric (billing alarms live here).
BILLING_METRICS_REGION = "us-east-1"
