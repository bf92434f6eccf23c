"""What went wrong, in one message that names the problem and the fix: never a traceback.

Exit codes: 2 for a problem the user fixes in the command or the spec, 1 for AWS refusing or failing,
130 for Ctrl-C (128 + SIGINT, what shells report), 141 when the reader of the output went away
(128 + SIGPIPE: `mlfleet list | head`).
"""

from __future__ import annotations

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
    SSOTokenLoadError,
    TokenRetrievalError,
)

USAGE, AWS_FAILED, INTERRUPTED, BROKEN_PIPE = 2, 1, 130, 141

# Error codes AWS services use for "your identity may not do this" and "your credentials are not valid".
DENIED = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError",
                    "AuthorizationErrorException", "UnauthorizedException"})
BAD_CREDENTIALS = frozenset({"ExpiredToken", "ExpiredTokenException", "RequestExpired", "InvalidClientTokenId",
                             "UnrecognizedClientException", "SignatureDoesNotMatch", "InvalidSignatureException"})
THROTTLED = frozenset({"Throttling", "ThrottlingException", "ThrottledException", "RequestLimitExceeded",
                       "ProvisionedThroughputExceededException", "RequestThrottled", "TooManyRequestsException",
                       "TransactionInProgressException"})
# API operations whose IAM action has another name (the Service Authorization Reference lists them;
# TransactWriteItems is authorized as the PutItem of each put).
ACTION_OF_OPERATION = {"SendMessageBatch": "sqs:SendMessage", "Invoke": "lambda:InvokeFunction",
                       "TransactWriteItems": "dynamodb:PutItem"}
SIGN_IN = "sign in (e.g. `aws sso login --profile <profile>` and `export AWS_PROFILE=<profile>`)"


class CliError(Exception):
    """A problem the user can fix; printed without a traceback, exit code 2."""


class Stopped(Exception):
    """A command stopped part way (Ctrl-C, AWS refusing a call): `cause` is why, `done` says what was
    already done and how to undo it."""

    def __init__(self, cause: BaseException, done: str):
        self.cause = cause
        self.done = done
        super().__init__(done)


def iam_action(operation: str, actions: tuple[str, ...]) -> str:
    """The IAM action an API operation needs, from the actions the command's policy declares."""
    if operation in ACTION_OF_OPERATION:
        return ACTION_OF_OPERATION[operation]
    return next((a for a in actions if a.split(":", 1)[1] == operation), operation)


def aws_message(error: BaseException, *, environment: str | None, region: str | None,
                actions: tuple[str, ...] = ()) -> str:
    """One line for an AWS error: what was refused, why, and what to do."""
    policy = (f"`mlfleet -e {environment or '<env>'} --region {region or '<home region>'} policy --account "
              "<account id>` prints the policy the command needs; ask your AWS administrator to attach it to your role")
    if isinstance(error, (NoCredentialsError, PartialCredentialsError)):
        return f"no AWS credentials found: {SIGN_IN}, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    if isinstance(error, (SSOTokenLoadError, TokenRetrievalError)):
        return f"your AWS sign-in has expired: {SIGN_IN}"
    if isinstance(error, ProfileNotFound):
        return f"{error}: `aws configure list-profiles` lists the profiles there are"
    if isinstance(error, NoRegionError):
        return "no AWS region: give --region (the stack's home region) or set MLFLEET_REGION"
    if isinstance(error, ConnectionError):
        return f"cannot reach AWS ({error}): check the network, a VPN or HTTPS_PROXY, then run the command again"
    if isinstance(error, ClientError):
        info = error.response.get("Error", {})
        code, text = str(info.get("Code", "")), str(info.get("Message", "")).strip()
        operation = error.operation_name
        if code in DENIED:
            return f"AWS refused {iam_action(operation, actions)} ({operation}): {text or code}. {policy}"
        if code in BAD_CREDENTIALS:
            return f"AWS did not accept your credentials ({code}: {text}): {SIGN_IN}"
        if code in THROTTLED:
            return f"AWS is throttling {operation} even after retries ({code}): wait a minute and run the command again"
        return f"AWS refused {operation}: {code}: {text}"
    if isinstance(error, BotoCoreError):
        return f"the AWS call failed: {error}"
    return str(error)
