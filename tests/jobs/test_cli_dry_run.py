"""Dry runs from the checkout's stack file: no AWS at all, the same validation as a real submission (the
stack's fleets, limits, regions and what they can pull), every expanded command printed."""

from __future__ import annotations

import json

import pytest

from lambdas.jobs import cli

IMAGE = "ghcr.io/team/train:3"


@pytest.fixture(autouse=True)
def no_aws(monkeypatch, tmp_path):
    """No credentials anywhere: any AWS call would fail with NoCredentialsError."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "MLFLEET_ENVIRONMENT", "MLFLEET_REGION", "MLFLEET_TEAM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def dry_run(stack: str, *argv: str) -> tuple[int, list[str], list[str]]:
    out: list[str] = []
    err: list[str] = []
    code = cli.main(["submit", "--dry-run", "--stack", stack, *argv], out=out.append, err=err.append)
    return code, "\n".join(out).splitlines(), "\n".join(err).splitlines()


def test_the_readme_request_on_dev_names_the_closest_types_and_the_fitting_request():
    code, out, err = dry_run("dev", "--image", IMAGE, "--gpus", "1", "--vcpus", "8", "--memory", "30GiB", "--",
                             "python", "train.py")
    assert code == 2 and out == []
    assert err[:4] == [
        "mlfleet: invalid job spec:",
        "  - gpus=1, vcpus=8, memory_mib=30720: no instance type of this stack's fleets in us-east-1 holds that much; "
        "closest:",
        "      g5.2xlarge, g6.2xlarge schedule 1 GPU, 8 vCPUs, 30,433 MiB (29.7 GiB): memory_mib is 287 MiB over; ask "
        "for memory_mib <= 30433 (e.g. --memory 29GiB)",
        "      g4dn.xlarge, g5.xlarge, g6.xlarge schedule 1 GPU, 4 vCPUs, 14,704 MiB (14.4 GiB): vcpus is 4 over, "
        "memory_mib is 16,016 MiB over"]
    assert err[-1] == "Nothing was queued."


def test_a_sweep_prints_every_expanded_command_and_its_environment():
    code, out, err = dry_run("dev", "--image", IMAGE, "--gpus", "1", "--vcpus", "8", "--memory", "29GiB",
                             "--sweep", "lr=0.1,0.01", "--env", "WANDB_PROJECT=sweeps", "--env", "NOTE=a b",
                             "--", "python", "train.py", "--lr", "{lr}")
    submission = out[0].split(":")[0]
    assert code == 0 and err == []
    assert out == [
        f"{submission}: would queue 2 job(s) in dev (checked against stacks/Pulumi.dev.yaml; nothing written)",
        f"  image {IMAGE}",
        "  each job: 1 GPU, 8 vCPUs, 29,696 MiB; spot or on-demand; in us-east-1; up to 3 attempts",
        f"{submission}-00000  python train.py --lr 0.1", "    NOTE='a b'", "    WANDB_PROJECT=sweeps",
        f"{submission}-00001  python train.py --lr 0.01", "    NOTE='a b'", "    WANDB_PROJECT=sweeps"]


def test_a_spec_file_sweep_with_a_flag_over_it(tmp_path):
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"image: {IMAGE}\ngpus: 1\nvcpus: 4\nmemory_mib: 14000\nteam: vision\n"
                    "retry_on_exit_codes: [137]\ncommand: [python, train.py, --lr, '{lr}', --seed, '{seed}']\n"
                    "sweep:\n  lr: [0.1, 0.01]\n  seed: [1, 2, 3]\n")
    code, out, _ = dry_run("dev", "-f", str(spec), "--sweep", "seed=7")
    commands = [line.split("  ", 1)[1] for line in out if line.startswith("sub-") and "  " in line]
    assert code == 0 and commands == ["python train.py --lr 0.1 --seed 7", "python train.py --lr 0.01 --seed 7"]
    assert "retried on exit codes 137; team vision" in out[2]


@pytest.mark.parametrize(("file", "flags", "each"), [
    # Regression: --gpus over a file's share of one GPU was refused ("not both"), though flags override the file.
    ("gpu_memory_mib: 4096\ngpu_compute_percent: 50\n", ["--gpus", "1"], "  each job: 1 GPU, 4 vCPUs, 14,000 MiB;"),
    ("gpus: 1\n", ["--gpu-memory", "4GiB"], "  each job: 4,096 MiB of a shared GPU, 4 vCPUs, 14,000 MiB;"),
    ("gpu_memory_mib: 4096\n", ["--gpus", "0"], "  each job: 4,096 MiB of a shared GPU, 4 vCPUs, 14,000 MiB;"),
])
def test_a_gpu_flag_overrides_the_files_whole_gpus_or_share_of_one(tmp_path, file, flags, each):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"image: {IMAGE}\nvcpus: 4\nmemory_mib: 14000\ncommand: [serve]\n{file}")
    code, out, err = dry_run("dev", "-f", str(spec), *flags)
    assert (code, err) == (0, []) and out[2].startswith(each)


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--sweep", "seed=1,2,3", "--", "python", "train.py"], "sweep parameter seed: no {seed} in the command"),
    (["--sweep", "lr=0.1,0.1", "--", "train", "{lr}"], "sweep parameter lr: '0.1' given twice"),
])
def test_unused_and_repeated_sweep_values_are_refused(argv, fragment):
    code, _, err = dry_run("dev", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB", *argv)
    assert code == 2 and fragment in "\n".join(err)


@pytest.mark.parametrize("image", ["ghcr.io/Team/train:3", "ghcr.io/team/train:", "train@sha256:12"])
def test_an_invalid_image_reference_is_refused(image):
    code, _, err = dry_run("dev", "--image", image, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB")
    assert code == 2 and err[1].startswith(f"  - image={image!r}: ")


def test_prod_without_egress_refuses_an_image_it_cannot_pull_and_pulls_ecr_public_through_its_caches():
    code, _, err = dry_run("prod", "--image", IMAGE, "--gpus", "1", "--vcpus", "4", "--memory", "16GiB")
    assert code == 2 and err[1] == (
        "  - image='ghcr.io/team/train:3': us-east-1, us-east-2, us-west-2 cannot pull from ghcr.io (no internet "
        "egress there); use an ECR Public image (public.ecr.aws/..., pulled through each region's ECR cache)")
    code, out, _ = dry_run("prod", "--image", "public.ecr.aws/team/train:3", "--gpus", "1", "--vcpus", "4",
                           "--memory", "16GiB", "--regions", "us-east-2")
    assert code == 0 and out[1:3] == ["  image public.ecr.aws/team/train:3",
                                      "    us-east-2 pulls <account>.dkr.ecr.us-east-2.amazonaws.com/mlfleet/prod/team/train:3"]


def test_the_team_comes_from_the_environment_and_notify_from_what_the_stack_offers(monkeypatch):
    monkeypatch.setenv("MLFLEET_TEAM", "vision")
    code, out, _ = dry_run("dev", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB", "--json")
    assert code == 0 and json.loads("\n".join(out))["jobs"][0]["team"] == "vision"
    code, _, err = dry_run("dev", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB", "--notify", "slack")
    assert code == 2 and "this environment has no Slack channel" in err[1]  # dev has none; prod has one
    assert dry_run("prod", "--image", "public.ecr.aws/a/b:1", "--gpus", "1", "--vcpus", "1", "--memory", "1GiB",
                   "--notify", "slack", "--notify", "ana@example.com")[0] == 0


@pytest.mark.parametrize(("argv", "message"), [
    (["submit", "--stack", "dev", "--image", IMAGE], "--stack checks a dry run against the checkout's stack file"),
    (["-e", "prod", "submit", "--dry-run", "--stack", "dev", "--image", IMAGE], "-e prod and --stack dev name different"),
    (["submit", "--dry-run", "--stack", "nope", "--image", IMAGE],
     "--stack nope: there is no stacks/Pulumi.nope.yaml in "),
    (["submit", "--dry-run", "--stack", "Dev", "--image", IMAGE], "; the stacks are dev, prod, staging (README"),
])
def test_stack_misuse_is_one_message(argv, message):
    err: list[str] = []
    assert cli.main(argv, out=lambda _: None, err=err.append) == 2 and message in err[0] and len(err) == 1


def test_a_dry_run_that_cannot_reach_aws_points_at_the_stack_file():
    err: list[str] = []
    code = cli.main(["-e", "dev", "--region", "us-east-1", "submit", "--dry-run", "--image", IMAGE, "--", "x"],
                    out=lambda _: None, err=err.append)
    assert code == 1 and len(err) == 1 and err[0].startswith("mlfleet: no AWS credentials found: sign in")
    assert err[0].endswith("(a dry run needs no AWS against the checkout's stack file: --dry-run --stack dev)")


# Refused before the first AWS call: without credentials, these would otherwise say "no AWS credentials".
@pytest.mark.parametrize(("argv", "message"), [
    (["policy", "--account", "1234"], "--account '1234': an AWS account id is 12 digits"),
    (["status", "sub-1"], "'sub-1' is not a job id (sub-YYYYmmddHHMMSS-xxxxxx-NNNNN)"),
    (["follow", "train-run"], "'train-run' is neither a job id"),
    (["cancel", "sub-20261123093000-3fa2c"], "is neither a job id"),
    (["list", "--state", "done"], "--state DONE: not a job state (QUEUED, STARTING"),
    (["list", "--submission", "sub-20261123093000-3fa2c1-00001"], "is not a submission id"),
    (["cost", "--since", "yesterday"], "--since 'yesterday': expected a period such as 7d"),
    # Regressions: each raised a traceback (OverflowError, ValueError).
    (["cost", "--since", "999999d"], "--since '999999d': a period that starts before the year 1"),
    (["cost", "--since", "99999999999w"], "--since '99999999999w': a period that starts before the year 1"),
    (["cost", "--since", "1" * 5000 + "d"], "a period that starts before the year 1"),
    # Each slept on it after the first look at the ledger: ValueError, OverflowError.
    (["follow", "sub-20261123093000-3fa2c1", "--interval", "-1"], "--interval -1.0: seconds between looks, more than 0"),
    (["follow", "sub-20261123093000-3fa2c1", "--interval", "nan"], "--interval nan: seconds between looks"),
    (["follow", "sub-20261123093000-3fa2c1", "--interval", "inf"], "--interval inf: seconds between looks"),
])
def test_a_typo_is_refused_before_any_aws_call(argv, message):
    err: list[str] = []
    code = cli.main(["-e", "dev", "--region", "us-east-1", *argv], out=lambda _: None, err=err.append)
    assert code == 2 and len(err) == 1 and err[0].startswith("mlfleet: ") and message in err[0], err


def test_a_dry_run_checks_the_team_against_the_stack_files_teams(monkeypatch, tmp_path):
    """The stack file's mlfleet:teams as the deployed teams parameter would carry them (teams_document)."""
    import components.config.stack_file as stack_file

    with_teams = stack_file.stack_path("dev").read_text() + (
        "  mlfleet:teams:\n    vision: {weight: 3, maxGpus: 4}\n    nlp: {}\n  mlfleet:defaultTeam: nlp\n")
    (tmp_path / "Pulumi.dev.yaml").write_text(with_teams)
    monkeypatch.setattr(stack_file, "STACKS_DIR", tmp_path)
    code, _, err = dry_run("dev", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB", "--team", "visoin")
    assert code == 2 and "team='visoin': not a team of this environment (nlp, vision); did you mean vision?" in err[1]
    code, out, _ = dry_run("dev", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB", "--priority", "7")
    assert code == 0 and "; team nlp; priority 7" in out[2]  # the stack's default team


@pytest.mark.parametrize(("flag", "seconds", "shown"), [("90m", 5400.0, "1.5 h"), ("2h", 7200.0, "2 h"),
                                                       ("1.5d", 129600.0, "1.5 d"), ("45", 45.0, "45 s")])
def test_an_expected_runtime_flag_becomes_the_specs_estimate(flag, seconds, shown):
    code, out, err = dry_run("dev", "--image", IMAGE, "--gpus", "1", "--vcpus", "4", "--memory", "14GiB",
                             "--expected-runtime", flag, "--json", "--", "python", "train.py")
    assert code == 0 and err == []
    assert json.loads("\n".join(out))["jobs"][0]["expected_runtime_s"] == seconds
    code, out, _ = dry_run("dev", "--image", IMAGE, "--gpus", "1", "--vcpus", "4", "--memory", "14GiB",
                           "--expected-runtime", flag, "--", "python", "train.py")
    assert out[2].endswith(f"; expected to run about {shown}")


@pytest.mark.parametrize(("flag", "problem"), [
    ("2x", "expected-runtime='2x': must be a duration like 90m, 2h or 1.5d (or seconds)"),
    ("100d", "expected-runtime='100d': must be more than 0 and at most 90 days"),
    ("0m", "expected-runtime='0m': must be more than 0 and at most 90 days")])
def test_a_bad_expected_runtime_is_named_and_nothing_is_queued(flag, problem):
    code, out, err = dry_run("dev", "--image", IMAGE, "--gpus", "1", "--vcpus", "4", "--memory", "14GiB",
                             "--expected-runtime", flag, "--", "python", "train.py")
    assert code == 2 and out == [] and err == ["mlfleet: invalid job spec:", f"  - {problem}", "Nothing was queued."]


@pytest.mark.parametrize("argv", [["--gpus", "0.5"], ["--gpus", ".25"]])
def test_part_of_a_gpu_asked_as_gpus_says_to_ask_for_its_memory(argv, capsys):
    """`--gpus 0.5` is how a first fractional job is asked for: argparse's "invalid int value" said nothing of
    --gpu-memory, the way to ask for part of a GPU (issue 15)."""
    with pytest.raises(SystemExit) as usage:
        dry_run("dev", "--image", IMAGE, *argv, "--vcpus", "4", "--memory", "8GiB", "--", "python")
    err = capsys.readouterr().err
    assert usage.value.code == 2
    assert f"argument --gpus: gpus={float(argv[1])!r}: must be a whole number of GPUs; for part of one GPU ask for " \
           "its memory instead (gpu_memory_mib: in the spec file, --gpu-memory 8GiB on the command line" in err


@pytest.mark.parametrize("share", [["--gpus", "1"], ["--gpu-memory", "4GiB"]])
def test_a_pattern_no_fleet_type_matches_is_named_with_the_types_there_are(share):
    """Said of the pattern, with the fleets' types: it read 'no instance type ... matching 'p5.*' holds that much',
    a problem of the sizes, and with a share of a GPU 'can share its GPUs (types: none)'."""
    code, out, err = dry_run("dev", "--image", IMAGE, *share, "--vcpus", "4", "--memory", "8GiB",
                             "--instance-type-pattern", "p5.*", "--", "python")
    assert code == 2 and out == []
    assert err == ["mlfleet: invalid job spec:",
                   "  - instance_type_pattern='p5.*': matches no instance type of this stack's fleets in us-east-1 "
                   "(g4dn.xlarge, g5.2xlarge, g5.xlarge, g6.2xlarge, g6.xlarge)",
                   "Nothing was queued."]


def test_a_pattern_matching_nothing_and_too_many_gpus_are_both_named():
    """Every problem at once: the pattern's did not hide the GPU count's."""
    code, _, err = dry_run("dev", "--image", IMAGE, "--gpus", "9", "--vcpus", "4", "--memory", "8GiB",
                           "--instance-type-pattern", "p5.*", "--", "python")
    assert code == 2 and err[1].startswith("  - instance_type_pattern='p5.*': matches no instance type")
    assert err[2].startswith("  - gpus=9: more GPUs than any instance type of this stack's fleets has") and len(err) == 4
