"""The job-events handler's edges: what it drops, what it ignores, what makes Lambda deliver an event again."""

from __future__ import annotations

import pytest
from conftest import ENV, HOME, build_fleet, fleets_json

from lambdas.job_events import handler as job_events

NOW_ISO = "2026-11-22T12:00:00Z"


def settings(home) -> job_events.Settings:
    return job_events.Settings(environment=ENV, jobs_table=home["table"], jobs_queue_url=home["queue"],
                               jobs_dlq_url=home["dlq"], fleets=fleets_json(), rebalance_timeout_minutes=30,
                               notify_email_topic_arn="arn:aws:sns:us-east-1:123456789012:mlfleet-dev-job-notifications")


@pytest.mark.parametrize("event, fragment", [
    (None, "is not an object"),
    ({"detail-type": "ECS Task State Change", "region": HOME, "detail": "x"}, "detail='x' is not a JSON object"),
    ({"detail-type": "ECS Task State Change", "region": HOME, "detail": {"clusterArn": 5}}, "clusterArn='5' is not a string"),
    ({"detail-type": "EC2 Spot Instance Interruption Warning", "region": HOME, "time": "yesterday",
      "detail": {"instance-id": "i-0123456789abcdef0"}}, "event.time='yesterday': not an ISO-8601 time"),
    ({"detail-type": "Scheduled Event"}, "event.time is missing"),
])
def test_a_malformed_event_is_dropped_with_its_reason(aws, event, fragment):
    result = job_events.handle(event, settings({"table": "t", "queue": "q", "dlq": "d"}))
    assert fragment in result["rejected"]


def test_an_event_from_a_region_without_fleets_is_ignored(home):
    event = {"detail-type": "EC2 Spot Instance Interruption Warning", "region": "ap-south-2", "time": NOW_ISO,
             "detail": {"instance-id": "i-0123456789abcdef0"}}
    assert job_events.handle(event, settings(home)) == {"ignored": "region ap-south-2"}


def test_an_item_that_fails_makes_lambda_deliver_the_event_again_after_the_others(home, faults):
    build_fleet(size=1)
    event = {"detail-type": "EC2 Instance Rebalance Recommendation", "region": HOME, "time": NOW_ISO,
             "detail": {"instance-id": "i-0123456789abcdef0"}}
    with faults.active(("ec2", "DescribeInstances"), "throttle"), pytest.raises(job_events.RetryLater, match="RequestLimitExceeded"):
        job_events.handle(event, settings(home))
    assert job_events.handle(event, settings(home)) == {"tagged": False, "errors": 0}  # not an instance of ours
