"""Secrets by reference: which references a job spec may name, and which plain values look like credentials.

A job names secrets as `secrets: {NAME: ref}`. ECS resolves each reference when it starts the task, with
the task execution role, and sets NAME in the container; the value is never in the ledger, the queue or
the task's overrides (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/specifying-sensitive-data.html).
A reference is one of, within the environment's prefix (the only ones the execution role may read,
components/compute/cluster.py):

- an SSM parameter name `/mlfleet/<env>/...` (read in the region the job runs in), or its ARN
  `arn:aws:ssm:<region>:<account>:parameter/mlfleet/<env>/...` (pins the region);
- a Secrets Manager secret ARN `arn:aws:secretsmanager:<region>:<account>:secret:mlfleet/<env>/...`,
  optionally with ECS's `:json-key:version-stage:version-id` suffix. ECS takes Secrets Manager secrets
  only by full ARN (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_Secret.html).

Plain environment values that look like credentials are refused, by name (the words people use for
them) or by shape (patterns as in Yelp/detect-secrets: detect_secrets/plugins/aws.py, private_key.py,
github_token.py, jwt.py, slack.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_PARTITION = r"arn:aws(?:-cn|-us-gov)?"
_REGION = r"[a-z]{2}(?:-[a-z]+)+-\d"
_ACCOUNT = r"\d{12}"
# SSM parameter names: letters, digits, . - _ and / between levels
# (https://docs.aws.amazon.com/systems-manager/latest/userguide/sysman-paramstore-su-create.html).
_SSM_PATH = r"[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)*"
# Secrets Manager names: letters, digits and /_+=.@- (CreateSecret's Name).
_SECRET_NAME = r"[A-Za-z0-9/_+=.@\-]+"
# A Secrets Manager reference ECS accepts may end in :json-key:version-stage:version-id.
_JSON_KEY_SUFFIX = r"(?::[^:]*:[^:]*:[^:]*)?"

# Words in a variable's name that say its value is a credential. Whole words only, so that
# TOKENIZERS_PARALLELISM or MAX_NEW_TOKENS (model settings) pass and HF_TOKEN or DB_PASSWORD do not.
CREDENTIAL_WORDS = frozenset({"PASSWORD", "PASSWD", "SECRET", "TOKEN", "CREDENTIAL", "CREDENTIALS"})
CREDENTIAL_PAIRS = frozenset({("API", "KEY"), ("ACCESS", "KEY"), ("PRIVATE", "KEY")})
CREDENTIAL_SUFFIXES = ("PASSWORD", "PASSWD", "SECRET", "TOKEN", "APIKEY", "ACCESSKEY", "PRIVATEKEY")
CREDENTIAL_SHAPES = (
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a private key", re.compile(r"BEGIN (?:DSA |EC |OPENSSH |PGP |RSA |SSH2 ENCRYPTED |ENCRYPTED )?PRIVATE KEY")),
    ("a bearer token", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{16,}=*")),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9_]{36}|github_pat_[A-Za-z0-9_]{22,})")),
    ("a Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("a JSON web token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")),
)


def ssm_prefix(environment: str) -> str:
    return f"/mlfleet/{environment}/"


def secrets_manager_prefix(environment: str) -> str:
    return f"mlfleet/{environment}/"


def reference_kind(reference: str, environment: str) -> str | None:
    """"ssm" or "secretsmanager" for a reference inside the environment's prefix, else None."""
    env = re.escape(environment)
    if {".", ".."} & set(reference.split("/")):
        return None  # not a path trick SSM would resolve, but a name nobody should have to read twice
    if re.fullmatch(rf"/mlfleet/{env}/{_SSM_PATH}", reference) or re.fullmatch(
            rf"{_PARTITION}:ssm:{_REGION}:{_ACCOUNT}:parameter/mlfleet/{env}/{_SSM_PATH}", reference):
        return "ssm"
    if re.fullmatch(rf"{_PARTITION}:secretsmanager:{_REGION}:{_ACCOUNT}:secret:mlfleet/{env}/{_SECRET_NAME}"
                    rf"{_JSON_KEY_SUFFIX}", reference):
        return "secretsmanager"
    return None


def reference_problem(name: str, reference, environment: str) -> str | None:
    if isinstance(reference, str) and reference_kind(reference, environment):
        return None
    return (f"secrets {name}={reference!r}: not a secret of environment {environment!r}; name an SSM parameter "
            f"{ssm_prefix(environment)}... (or its ARN) or a Secrets Manager secret ARN "
            f"arn:aws:secretsmanager:<region>:<account>:secret:{secrets_manager_prefix(environment)}...")


def _redacted(value: str) -> str:
    return f"{value[:4]}... ({len(value)} characters)" if len(value) > 8 else "(redacted)"


def looks_like_credential(name: str, value: str) -> str | None:
    """Why NAME=value looks like a credential (by its name or by the value's shape), or None."""
    if value.strip():
        words = name.upper().split("_")
        if CREDENTIAL_WORDS.intersection(words) or CREDENTIAL_PAIRS.intersection(zip(words, words[1:])) \
                or name.upper().endswith(CREDENTIAL_SUFFIXES):
            return "its name says it holds a credential"
    for what, pattern in CREDENTIAL_SHAPES:
        if pattern.search(value):
            return f"its value looks like {what}"
    return None


def credential_problem(name: str, value: str, environment: str | None) -> str | None:
    why = looks_like_credential(name, value)
    if why is None:
        return None
    env = environment or "<env>"
    return (f"environment {name}={_redacted(value)}: {why}. Plain values are stored in the job ledger and sent in "
            f"the task's overrides, readable by every user. Store it as an SSM SecureString parameter under "
            f"{ssm_prefix(env)} or a Secrets Manager secret named {secrets_manager_prefix(env)}..., and reference "
            f"it instead: `secrets: {{{name}: {ssm_prefix(env)}{name.lower().replace('_', '-')}}}` in the spec, or "
            f"--secret {name}={ssm_prefix(env)}{name.lower().replace('_', '-')}")


def container_secrets(secrets: Mapping[str, str]) -> list[dict[str, str]]:
    """The container definition's `secrets`, in a stable order (so equal sets compare equal)."""
    return [{"name": name, "valueFrom": reference} for name, reference in sorted(secrets.items())]
