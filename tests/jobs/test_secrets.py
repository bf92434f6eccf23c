"""Secrets by reference: what a spec may name, what it may not carry in plain text, and how ECS gets it.

The end-to-end test runs the real submission command and scheduler against moto: the task definition
revision carries the references in `secrets`, StartTask's overrides carry none, and the ledger holds only
the references.
"""

from __future__ import annotations

import fnmatch
import json

import pytest
from conftest import CLUSTER, ENV, HOME, aws_client, build_fleet, fleets_json, open_admission, scheduler_settings
from iam_conditions import allows

from components.compute.cluster import job_secrets_policy
from lambdas.common.catalog import load_catalog
from lambdas.jobs import cli
from lambdas.jobs.cli import submission
from lambdas.jobs.credentials import looks_like_credential, reference_kind
from lambdas.jobs.spec import SpecError, expand, parse_spec, spec_from_document
from lambdas.scheduler.handler import run

GOOD = {"image": "ghcr.io/team/train:1.0", "command": ["python", "train.py"], "gpus": 1, "vcpus": 1, "memory_mib": 1024}
ACCOUNT = "123456789012"
SSM_ARN = f"arn:aws:ssm:us-west-2:{ACCOUNT}:parameter/mlfleet/dev/db/password"
SECRET_ARN = f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:mlfleet/dev/wandb-AbCdEf"


def parse(stack: str | None = ENV, **changes):
    return parse_spec({**GOOD, **changes}, fleet_regions=(HOME,), catalog=load_catalog(), default_max_attempts=3,
                      environment=stack)


@pytest.mark.parametrize("reference", ["/mlfleet/dev/wandb-key", "/mlfleet/dev/team/db.password", SSM_ARN, SECRET_ARN,
                                       SECRET_ARN + ":api_key::", SECRET_ARN + ":api_key:AWSCURRENT:"])
def test_references_inside_the_environment_are_kept_as_references(reference):
    spec = parse(secrets={"TOKEN": reference})
    assert spec.secrets == {"TOKEN": reference} and "TOKEN" not in spec.environment
    assert spec_from_document(spec.to_document()) == spec


@pytest.mark.parametrize("reference", [
    "/mlfleet/prod/wandb-key",  # another environment
    "/mlfleet/devel/x",  # a prefix of the name, not the environment
    "/other/dev/x", "mlfleet/dev/x", "/mlfleet/dev/", "/mlfleet/dev/../prod/x",
    f"arn:aws:ssm:us-east-1:{ACCOUNT}:parameter/mlfleet/prod/x",
    f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:mlfleet/prod/x",
    f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:other/dev/x",
    "arn:aws:s3:::mlfleet/dev/x", "hunter2", "", 42, None,
])
def test_references_outside_the_environment_are_refused_naming_key_and_value(reference):
    with pytest.raises(SpecError) as error:
        parse(secrets={"TOKEN": reference})
    (problem,) = error.value.problems
    assert problem.startswith(f"secrets TOKEN={reference!r}: not a secret of environment 'dev'")


@pytest.mark.parametrize("secrets, fragment", [
    ({"1BAD": "/mlfleet/dev/x"}, "secrets key '1BAD': not a valid variable name"),
    ({"MLFLEET_JOB_ID": "/mlfleet/dev/x"}, "secrets key 'MLFLEET_JOB_ID': set by mlfleet on every task"),
    ("/mlfleet/dev/x", "secrets='/mlfleet/dev/x': must be a mapping"),
])
def test_bad_secret_names(secrets, fragment):
    with pytest.raises(SpecError, match=fragment):
        parse(secrets=secrets)


def test_a_name_cannot_be_both_plain_and_secret_and_secrets_need_the_environment():
    with pytest.raises(SpecError, match="secrets key 'DB_HOST': already set by environment"):
        parse(environment={"DB_HOST": "db"}, secrets={"DB_HOST": "/mlfleet/dev/db-host"})
    with pytest.raises(SpecError, match="the environment the job runs in is not known"):
        parse(stack=None, secrets={"X": "/mlfleet/dev/x"})


CREDENTIALS = [
    ("DB_PASSWORD", "s3cret"), ("HF_TOKEN", "abc"), ("WANDB_API_KEY", "0123"), ("AWS_SECRET_ACCESS_KEY", "x"),
    ("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE"), ("GITHUBTOKEN", "x"), ("CLIENT_SECRET", "y"), ("MY_CREDENTIALS", "z"),
    ("CONFIG", "AKIAIOSFODNN7EXAMPLE"), ("SSH_KEY", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNz"),
    ("PEM", "-----BEGIN RSA PRIVATE KEY-----"), ("HEADER", "Authorization: Bearer abcdefghijklmnopqrstuvwxyz"),
    ("GH", "ghp_" + "a" * 36), ("SLACK", "xoxb-1234567890-abcdef"), ("HUB", "hf_" + "a" * 34),
    ("JWT", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sig"), ("private_key", "x"),
]
NOT_CREDENTIALS = [
    ("TOKENIZERS_PARALLELISM", "false"), ("MAX_NEW_TOKENS", "512"), ("NUM_TOKENS", "10"), ("SECRET_NAME", ""),
    ("WANDB_PROJECT", "sweeps"), ("KEY_COLUMN", "id"), ("LR", "0.001"), ("DATA", "s3://bucket/prefix/AKIA"),
    ("GIT_SHA", "0123456789abcdef0123456789abcdef01234567"), ("PASSWORD_MIN_LENGTH", ""),
]


@pytest.mark.parametrize("name, value", CREDENTIALS)
def test_credential_looking_environment_values_are_refused_with_how_to_reference_them(name, value):
    with pytest.raises(SpecError) as error:
        parse(environment={name: value})
    (problem,) = error.value.problems
    assert problem.startswith(f"environment {name}=") and ("looks like" in problem or "says it holds" in problem)
    assert "/mlfleet/dev/" in problem and "mlfleet/dev/" in problem and f"--secret {name}=" in problem
    if len(value) > 8:
        assert value not in problem  # the credential itself is never echoed


@pytest.mark.parametrize("name, value", NOT_CREDENTIALS)
def test_ordinary_settings_pass(name, value):
    assert looks_like_credential(name, value) is None
    assert parse(environment={name: value}).environment == {name: value}


def test_a_credential_a_sweep_substitutes_into_the_environment_is_refused_too():
    """Regression: `--env HUB={tok} --sweep tok=hf_...` put the token in plain environment values (the ledger, the
    task's overrides, the dry run's listing): the spec's check saw only `{tok}`."""
    token = "hf_" + "a" * 34
    with pytest.raises(SpecError) as error:
        expand(parse(command=["x"], environment={"HUB": "{tok}"}), sweep={"tok": ["plain", token]}, stack=ENV)
    (problem,) = error.value.problems
    assert problem.startswith("job 1: environment HUB=hf_a... (37 characters): its value looks like a Hugging Face")
    assert token not in problem and "/mlfleet/dev/" in problem
    assert len(expand(parse(command=["x"], environment={"LR": "{lr}"}), sweep={"lr": ["0.1", "0.01"]})) == 2


def test_the_execution_role_reads_exactly_the_references_a_spec_may_name():
    """Each reference the spec accepts is inside the execution role's resources, each one it refuses outside."""
    policy = json.loads(job_secrets_policy(ENV, ACCOUNT))
    patterns = {s["Action"]: s["Resource"] for s in policy["Statement"]}

    def readable(reference: str) -> bool:
        kind = reference_kind(reference, ENV) or ("ssm" if ":ssm:" in reference or reference.startswith("/") else
                                                  "secretsmanager")
        if kind == "ssm":
            arn = reference if reference.startswith("arn:") else f"arn:aws:ssm:us-east-1:{ACCOUNT}:parameter{reference}"
            return fnmatch.fnmatchcase(arn, patterns["ssm:GetParameters"])
        return fnmatch.fnmatchcase(reference.split(":api_key")[0], patterns["secretsmanager:GetSecretValue"])

    for reference in ["/mlfleet/dev/wandb-key", SSM_ARN, SECRET_ARN, SECRET_ARN + ":api_key::"]:
        assert reference_kind(reference, ENV) and readable(reference), reference
    for reference in ["/mlfleet/prod/x", f"arn:aws:ssm:us-east-1:{ACCOUNT}:parameter/mlfleet/prod/x",
                      f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:mlfleet/prod/x",
                      "arn:aws:ssm:us-east-1:999999999999:parameter/mlfleet/dev/x"]:
        assert not readable(reference), reference


def decrypt_request(reference: str, via: str | None = None) -> tuple[str, dict]:
    """The key ARN and request context of the kms:Decrypt that SSM or Secrets Manager sends, on the role's
    behalf, when ECS reads `reference` (an SSM name is read in the region the job runs in): Parameter
    Store's encryption context is PARAMETER_ARN, the parameter's ARN (the KMS developer guide, "How AWS
    Systems Manager Parameter Store uses AWS KMS"); Secrets Manager's SecretARN and SecretVersionId (the
    Secrets Manager user guide, "Secret encryption and decryption in AWS Secrets Manager")."""
    if reference.startswith("/"):
        reference = f"arn:aws:ssm:{HOME}:{ACCOUNT}:parameter{reference}"
    service, region = reference.split(":")[2:4]
    if service == "ssm":
        context = {"kms:EncryptionContext:PARAMETER_ARN": reference}
    else:  # the secret's ARN, without ECS's :json-key:version-stage:version-id
        context = {"kms:EncryptionContext:SecretARN": ":".join(reference.split(":")[:7]),
                   "kms:EncryptionContext:SecretVersionId": "EXAMPLE1-90ab-cdef-fedc-ba987SECRET1"}
    if via != "":
        context["kms:ViaService"] = f"{via or service}.{region}.amazonaws.com"
    return f"arn:aws:kms:{region}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab", context


def test_the_execution_role_decrypts_only_the_references_a_spec_may_name():
    """KMS lets the role decrypt through SSM or Secrets Manager only what they decrypt for a reference of the
    environment: any SecureString parameter or secret of the account encrypted with a customer managed key
    was decryptable through either service before (kms:ViaService was the only condition)."""
    statements = json.loads(job_secrets_policy(ENV, ACCOUNT))["Statement"]

    def decryptable(reference: str, via: str | None = None) -> bool:
        return allows(statements, "kms:Decrypt", *decrypt_request(reference, via))

    for reference in ["/mlfleet/dev/wandb-key", "/mlfleet/dev/team/db.password", SSM_ARN, SECRET_ARN,
                      SECRET_ARN + ":api_key::", SECRET_ARN + ":api_key:AWSCURRENT:"]:
        assert reference_kind(reference, ENV) and decryptable(reference), reference
    # Another environment's, another prefix's, another account's (a spec may name it, the role reads none).
    for reference in ["/mlfleet/prod/x", "/mlfleet/devel/x", "/other/dev/x",
                      f"arn:aws:ssm:us-east-1:{ACCOUNT}:parameter/mlfleet/prod/x",
                      "arn:aws:ssm:us-east-1:999999999999:parameter/mlfleet/dev/x",
                      f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:mlfleet/prod/x-AbCdEf",
                      f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:other/dev/x-AbCdEf",
                      "arn:aws:secretsmanager:us-east-1:999999999999:secret:mlfleet/dev/x-AbCdEf"]:
        assert not decryptable(reference), reference
    # Only through the service that holds the reference, and never directly.
    assert not decryptable(SSM_ARN, via="secretsmanager") and not decryptable(SECRET_ARN, via="ssm")
    assert not decryptable(SSM_ARN, via="") and not decryptable(SECRET_ARN, via="")
    assert {s["Sid"] for s in statements if s["Action"] == "kms:Decrypt"} == {"DecryptJobParameters", "DecryptJobSecrets"}


@pytest.fixture
def world(home, faults):
    instances = build_fleet(size=1)
    open_admission()
    service = cli.JobService(ENV, HOME, home["queue"], home["table"], f"mlfleet-{ENV}-scheduler",
                             cli.parse_fleets(fleets_json()), 3, f"/mlfleet/{ENV}/jobs")
    return home, faults, service, instances


def test_secrets_reach_the_task_definition_not_the_overrides_or_the_ledger(world):
    home, faults, service, _ = world
    submitted = cli.submit(service, {**GOOD, "command": ["python", "train.py", "--seed", "{seed}"],
                                     "environment": {"WANDB_PROJECT": "sweeps"},
                                     "secrets": {"WANDB_API_KEY": SECRET_ARN, "DB_PASSWORD": "/mlfleet/dev/db"}},
                           sweep={"seed": ["1", "2"]})
    plain = cli.submit(service, {**GOOD, "command": ["eval"]})
    (item,) = [i for i in aws_client("dynamodb", HOME).scan(TableName=home["table"])["Items"]
               if i["job_id"]["S"] == submitted.job_ids[0]]
    assert item["spec"]["M"]["secrets"] == {"M": {"WANDB_API_KEY": {"S": SECRET_ARN}, "DB_PASSWORD": {"S": "/mlfleet/dev/db"}}}

    summary = run(scheduler_settings(home), lambda: 170_000)

    assert sorted(summary["started"]) == sorted([*submitted.job_ids, *plain.job_ids])
    starts = faults.carried_out("ecs", "StartTask")
    for params in starts:
        override = params["overrides"]["containerOverrides"][0]
        assert "secrets" not in override and {e["name"] for e in override["environment"]} <= {
            "WANDB_PROJECT", "MLFLEET_JOB_ID", "MLFLEET_ATTEMPT", "MLFLEET_CHECKPOINT_URI"}
    ecs = aws_client("ecs", HOME)
    definitions = {p["startedBy"]: ecs.describe_task_definition(taskDefinition=p["taskDefinition"])["taskDefinition"]
                   for p in starts}
    with_secrets = {definitions[j]["taskDefinitionArn"] for j in submitted.job_ids}
    assert len(with_secrets) == 1  # one revision per image and secret set, reused by the sweep
    assert definitions[submitted.job_ids[0]]["containerDefinitions"][0]["secrets"] == [
        {"name": "DB_PASSWORD", "valueFrom": "/mlfleet/dev/db"}, {"name": "WANDB_API_KEY", "valueFrom": SECRET_ARN}]
    # The plain job's revision is registered after the one with secrets (so it is the latest), and does
    # not inherit them.
    assert "secrets" not in definitions[plain.job_ids[0]]["containerDefinitions"][0]
    assert len(faults.carried_out("ecs", "RegisterTaskDefinition")) == 2
    tasks = ecs.describe_tasks(cluster=CLUSTER, tasks=ecs.list_tasks(cluster=CLUSTER)["taskArns"])["tasks"]
    assert not any("secrets" in json.dumps(t["overrides"]) for t in tasks)


def test_the_command_line_takes_secret_references(world):
    home, _, service, _ = world
    args = cli.parser().parse_args(["submit", "--image", "img:1", "--gpus", "1", "--vcpus", "1", "--memory", "1GiB",
                                    "--secret", "HF_TOKEN=/mlfleet/dev/hf", "--", "python", "x.py"])
    assert submission.spec_document(args)["secrets"] == {"HF_TOKEN": "/mlfleet/dev/hf"}
    refused = cli.parser().parse_args(["submit", "--image", "img:1", "--gpus", "1", "--vcpus", "1", "--memory", "1GiB",
                                       "--env", "HF_TOKEN=hf_" + "a" * 34, "--", "python", "x.py"])
    with pytest.raises(SpecError, match="HF_TOKEN=hf_a... \\(37 characters\\): its name says it holds a credential"):
        cli.submit(service, submission.spec_document(refused))
    assert aws_client("dynamodb", HOME).scan(TableName=home["table"])["Count"] == 0
