"""`mlfleet notify subscribe ADDRESS`: hear by e-mail when a submission that names ADDRESS (`--notify ADDRESS`)
has ended.

The environment's job-notification topic (components/jobs/notifications.py) carries every e-mail
notification with the attribute `notify` listing its recipients; each address has one e-mail subscription
whose filter policy lets through only messages that list it, so an address gets its own submissions' news and
nobody else's (https://docs.aws.amazon.com/sns/latest/dg/sns-message-filtering.html; a String.Array
attribute matches when any element does). SNS mails a confirmation link first: until it is clicked the
subscription is pending and delivers nothing. Subscribing again is harmless (SNS keeps one subscription
per address and resends the confirmation while it is pending).
"""

from __future__ import annotations

import json

from ...common.aws import client
from .errors import CliError
from .service import JobService
from ..spec import EMAIL

ATTRIBUTE = "notify"


def filter_policy(address: str) -> str:
    return json.dumps({ATTRIBUTE: [address]})


def subscribe(service: JobService, address: str) -> str:
    if not EMAIL.fullmatch(address):
        raise CliError(f"{address!r} is not an e-mail address")
    topic = service.notification_topics.get("email")
    if topic is None:
        raise CliError(f"{service.environment} publishes no job notifications (run `pulumi up` for the stack with "
                       "this version of mlfleet)")
    arn = client("sns", service.region).subscribe(
        TopicArn=topic, Protocol="email", Endpoint=address, ReturnSubscriptionArn=True,
        Attributes={"FilterPolicy": filter_policy(address), "FilterPolicyScope": "MessageAttributes"},
    )["SubscriptionArn"]
    return arn
