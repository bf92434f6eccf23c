"""Faults at the botocore boundary of the functions' AWS clients, against moto.

Every client the functions make comes from one boto3 session (lambdas.common.aws.session()). A handler on
its `before-call` event sees each API call before moto answers it (moto hooks the later `before-send`), so
a test can record which operations a run makes, fail chosen operations the way AWS would, or answer an
operation itself where moto cannot (stubs). The test's own boto3 clients (the default session) are not
affected.

Fault kinds, each the error the caller finally sees:
- "throttle": the throttling error botocore's standard mode gives up on after its retries (no effect);
- "validation": the service's validation error for the request (no effect);
- "timeout": the request is carried out, then its response is lost (ReadTimeoutError): the hardest case
  for a caller, which cannot tell whether a write or a StartTask happened.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ReadTimeoutError

from lambdas.common.aws import reset_clients, session

KINDS = ("throttle", "timeout", "validation")
# What each service calls "slow down" and "invalid request" (their API references' common errors).
THROTTLE_CODES = {"ec2": "RequestLimitExceeded", "autoscaling": "Throttling"}
VALIDATION_CODES = {"dynamodb": "ValidationException", "ecs": "InvalidParameterException", "ec2": "InvalidParameterValue",
                    "autoscaling": "ValidationError", "sqs": "InvalidParameterValue", "ssm": "ValidationException",
                    "sns": "InvalidParameter"}

Operation = tuple[str, str]  # (service, operation): ("ecs", "StartTask")


def error_response(service: str, code: str, message: str) -> tuple[AWSResponse, dict]:
    status = 400
    return AWSResponse("https://faults.invalid/", status, {}, None), {
        "Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}


@dataclass
class Faults:
    calls: list[Operation] = field(default_factory=list)
    failing: dict[Operation, str] = field(default_factory=dict)
    # An answer instead of moto's: the call's parameters -> its parsed response, or an error_response(),
    # or None to let moto answer.
    stubs: dict[Operation, Callable[[dict], dict | None]] = field(default_factory=dict)
    # Changes to moto's answer, where moto leaves out what AWS reports (a container instance's GPUs): the
    # call's parameters and its parsed response, changed in place.
    amends: dict[Operation, Callable[[dict, dict], None]] = field(default_factory=dict)
    # Only while armed are faults injected (stubs always answer): setup and recovery runs go clean.
    armed: bool = False
    # Which calls of the failing operations to fail, by their parameters (None: every call): one call site
    # of an operation the handler makes in several places (the e-mail or the Slack publish).
    when: Callable[[dict], bool] | None = None
    injected: list[tuple[Operation, str]] = field(default_factory=list)
    # Calls that took effect (AWS, here moto, carried them out), with their parameters.
    effective: list[tuple[Operation, dict]] = field(default_factory=list)

    def reset(self, stubs: dict | None = None) -> None:
        """Forget what was recorded and injected (a new case), keeping the installed hooks."""
        self.calls, self.failing, self.injected, self.effective, self.armed, self.when = [], {}, [], [], False, None
        self.stubs = dict(stubs or {})

    def install(self) -> None:
        reset_clients()
        events = session().events
        events.register_first("before-parameter-build", self._keep_params)
        events.register_first("before-call", self._before_call)
        events.register_first("after-call", self._after_call)

    @staticmethod
    def _keep_params(params, context, **kwargs):
        context["faults.params"] = dict(params)

    @staticmethod
    def _operation(model) -> Operation:
        return model.service_model.service_name, model.name

    def _before_call(self, model, context, **kwargs):
        operation = self._operation(model)
        self.calls.append(operation)
        kind = self.failing.get(operation) if self.armed and self._chosen(context) else None
        if kind in ("throttle", "validation"):
            self.injected.append((operation, kind))
            service = operation[0]
            if kind == "throttle":
                return error_response(service, THROTTLE_CODES.get(service, "ThrottlingException"), "Rate exceeded")
            return error_response(service, VALIDATION_CODES.get(service, "ValidationException"),
                                  f"injected: {operation[1]} refused as invalid")
        stub = self.stubs.get(operation)
        if stub is not None:
            parsed = stub(context.get("faults.params", {}))
            if isinstance(parsed, tuple):
                return parsed
            if parsed is not None:
                return AWSResponse("https://stub.invalid/", 200, {}, None), {
                    **parsed, "ResponseMetadata": {"HTTPStatusCode": 200}}
        return None

    def _after_call(self, model, http_response, parsed, context, **kwargs):
        operation = self._operation(model)
        if http_response.status_code < 300:
            self.effective.append((operation, context.get("faults.params", {})))
            if operation in self.amends:
                self.amends[operation](context.get("faults.params", {}), parsed)
        if self.armed and self.failing.get(operation) == "timeout" and self._chosen(context):
            self.injected.append((operation, "timeout"))
            raise ReadTimeoutError(endpoint_url=f"https://{operation[0]}.invalid/ ({operation[1]}: response lost)")

    def _chosen(self, context) -> bool:
        return self.when is None or self.when(context.get("faults.params", {}))

    @contextmanager
    def active(self, operation: Operation | list[Operation] | None = None, kind: str | None = None,
               when: Callable[[dict], bool] | None = None) -> Iterator[Faults]:
        """Inject `kind` on every call of the operation(s) inside the block (none when operation is None),
        or on those whose parameters `when` accepts."""
        operations = operation if isinstance(operation, list) else [operation] if operation else []
        self.failing = {op: kind for op in operations}
        self.armed, self.when = True, when
        try:
            yield self
        finally:
            self.armed, self.when = False, None
            self.failing = {}

    def operations(self) -> list[Operation]:
        return list(dict.fromkeys(self.calls))

    def carried_out(self, service: str, operation: str) -> list[dict]:
        """Parameters of each call of the operation that took effect."""
        return [params for op, params in self.effective if op == (service, operation)]


def resent_once(client, service: str, operation: str):
    """`client` with its first `operation` request carried out and its answer lost, so that botocore's retry
    sends it again: what the standard retry mode (lambdas/common/aws.py RETRY_CONFIG) does after a read
    timeout or a 5xx (botocore/retries/standard.py TransientRetryableChecker). moto answers both sends.
    Returns the client and the attempts seen, [1, 2] once the call is made."""
    sends: list[int] = []

    def lose_first_answer(attempts, **kwargs):
        sends.append(attempts)
        return 0 if attempts == 1 else None  # resend at once, once

    client.meta.events.register_first(f"needs-retry.{service}.{operation}", lose_first_answer)
    return client, sends
