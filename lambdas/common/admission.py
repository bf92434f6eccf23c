"""The environment's admission flag: may the scheduler admit new jobs?

An SSM parameter `/mlfleet/<env>/admission` holds `{"state": "open"|"closed", "reason", "changedAt"}`.
The budget guard closes it when actual spend crosses 100% of the monthly budget; the scheduler reads
it before every scale-out and admission; people reopen it with one command:

    python -m lambdas.common.admission open --environment dev --region us-east-1   (make admission-open STACK=dev)

Running jobs are never touched by a closed flag. A missing or unreadable parameter counts as closed:
spending must not depend on a parameter someone deleted.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import datetime, timezone

from .permissions import needs

OPEN, CLOSED = "open", "closed"

READ_PERMISSIONS = (
    needs("ssm:GetParameter", resources=("arn:{partition}:ssm:{region}:{account}:parameter/mlfleet/{environment}/admission",),
          why="read the admission flag"),
)
WRITE_PERMISSIONS = (
    needs("ssm:GetParameter", "ssm:PutParameter",
          resources=("arn:{partition}:ssm:{region}:{account}:parameter/mlfleet/{environment}/admission",),
          why="close the admission flag when the budget is spent"),
)


def parameter_name(environment: str) -> str:
    return f"/mlfleet/{environment}/admission"


@dataclass(frozen=True)
class Admission:
    state: str
    reason: str
    changed_at: str

    @property
    def is_open(self) -> bool:
        return self.state == OPEN

    def encode(self) -> str:
        return json.dumps({"state": self.state, "reason": self.reason, "changedAt": self.changed_at}, sort_keys=True)


def decode(value: str) -> Admission:
    """Parse the parameter's value; anything unexpected reads as closed, with the reason saying why."""
    try:
        document = json.loads(value)
        state = document["state"]
        if state not in (OPEN, CLOSED):
            raise ValueError(state)
        return Admission(state, str(document.get("reason", "")), str(document.get("changedAt", "")))
    except (ValueError, KeyError, TypeError):
        return Admission(CLOSED, f"admission parameter holds an unreadable value {value[:80]!r}", "")


def read_admission(ssm, environment: str) -> Admission:
    try:
        value = ssm.get_parameter(Name=parameter_name(environment))["Parameter"]["Value"]
    except ssm.exceptions.ParameterNotFound:
        return Admission(CLOSED, f"parameter {parameter_name(environment)} does not exist", "")
    return decode(value)


def set_admission(ssm, environment: str, state: str, reason: str, now: datetime | None = None) -> Admission:
    """Write the flag. Idempotent: setting the state it already has keeps the original reason and time."""
    current = read_admission(ssm, environment)
    if current.state == state and current.changed_at:
        return current
    changed = Admission(state, reason, (now or datetime.now(timezone.utc)).isoformat(timespec="seconds"))
    ssm.put_parameter(Name=parameter_name(environment), Value=changed.encode(), Type="String", Overwrite=True)
    return changed


def main(argv: list[str] | None = None) -> int:
    import boto3

    parser = argparse.ArgumentParser(prog="python -m lambdas.common.admission", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("status", "open", "close"))
    parser.add_argument("--environment", required=True)
    parser.add_argument("--region", required=True, help="the stack's home region (aws:region)")
    parser.add_argument("--reason", default="", help="why (recorded in the flag)")
    args = parser.parse_args(argv)
    ssm = boto3.client("ssm", region_name=args.region)
    if args.action == "status":
        flag = read_admission(ssm, args.environment)
    else:
        state = OPEN if args.action == "open" else CLOSED
        flag = set_admission(ssm, args.environment, state, args.reason or f"set {state} by hand")
    print(json.dumps({"environment": args.environment, "state": flag.state, "reason": flag.reason,
                      "changedAt": flag.changed_at}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
