"""Two teams submit, against moto, with the real functions: the scheduler starts their jobs by weighted
fair share and never past a team's quota, a freed GPU goes to the team under its quota, and each team's
decayed use is kept in the ledger between runs without showing up as a job.

Where moto differs from AWS: container instances register 4 vCPUs and 7,482 MiB whatever their type (the
jobs are sized within that) and have no GPUs (the scheduler counts them from the catalog minus the tasks);
moto subtracts a task definition's cpu and memory from what an instance has left, not the task's
overrides, so the family's revision for the test image reserves no more than each job asks.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from conftest import (
    CLUSTER, ENV, FAMILY, HOME, build_fleet, event_settings, fleets_json, open_admission, scheduler_settings, set_teams,
    teams_json,
)

from lambdas.job_events.handler import handle as job_event
from lambdas.jobs import cli
from lambdas.jobs import ledger as L
from lambdas.jobs import teams as team_policies
from lambdas.scheduler import handler, teams
from lambdas.scheduler.handler import run as run_scheduler

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
JOB = {"image": "ghcr.io/team/train:3", "gpus": 1, "vcpus": 0.5, "memory_mib": 512, "command": ["python", "train.py", "--seed", "{seed}"]}
# vision weighs three times nlp but may hold 5 GPUs at most; the fleet is two g5.12xlarge (8 GPUs) at its cap.
TEAMS = teams_json({"vision": (3.0, 5), "nlp": (1.0, None)})


@pytest.fixture
def world(home):
    build_fleet(size=2, max_size=2)
    ecs = boto3.client("ecs", HOME)
    base = ecs.describe_task_definition(taskDefinition=FAMILY)["taskDefinition"]
    container = {**base["containerDefinitions"][0], "image": JOB["image"], "cpu": 512, "memoryReservation": 512}
    ecs.register_task_definition(family=FAMILY, containerDefinitions=[container], networkMode="bridge",
                                 taskRoleArn=base["taskRoleArn"], executionRoleArn=base["executionRoleArn"])
    open_admission()
    set_teams(TEAMS)
    service = cli.JobService(ENV, HOME, home["queue"], home["table"], f"mlfleet-{ENV}-scheduler",
                             cli.parse_fleets(fleets_json(max_instances=2)), 3, f"/mlfleet/{ENV}/jobs")
    return home, service


def scheduler(home, minutes: int) -> dict:
    settings = scheduler_settings(home, max_instances=2)
    return run_scheduler(settings, lambda: 170_000, now=NOW + timedelta(minutes=minutes))


def ledger() -> L.Ledger:
    return L.Ledger(boto3.client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")


def submit(service, team: str, count: int, priority: int = 5) -> list[str]:
    return list(cli.submit(service, {**JOB, "team": team, "priority": priority},
                           sweep={"seed": [str(n) for n in range(count)]}).job_ids)


def finish(home, job_id: str, minutes: int) -> None:
    """The job's task exits 0: ECS stops it and sends its state change to the job-events function."""
    ecs = boto3.client("ecs", HOME)
    (arn,) = ecs.list_tasks(cluster=CLUSTER, startedBy=job_id)["taskArns"]
    ecs.stop_task(cluster=CLUSTER, task=arn, reason="exited")
    (task,) = ecs.describe_tasks(cluster=CLUSTER, tasks=[arn])["tasks"]
    event = {"detail-type": "ECS Task State Change", "source": "aws.ecs", "region": HOME,
             "time": (NOW + timedelta(minutes=minutes)).isoformat(),
             "detail": {"clusterArn": task["clusterArn"], "taskArn": arn,
                        "containerInstanceArn": task["containerInstanceArn"], "startedBy": job_id,
                        "lastStatus": "STOPPED", "desiredStatus": "STOPPED", "stopCode": "EssentialContainerExited",
                        "stoppedReason": "exited", "containers": [{"name": "job", "exitCode": 0}],
                        "overrides": task["overrides"]}}
    job_event(event, event_settings(home, fleets_json(max_instances=2)), now=NOW + timedelta(minutes=minutes))
    assert ledger().get(job_id).state == L.SUCCEEDED


def running(job_ids) -> list[str]:
    return [j for j in job_ids if ledger().get(j).state == L.RUNNING]


def test_two_teams_share_the_fleet_by_weight_within_their_quotas(world):
    home, service = world
    vision = submit(service, "vision", 6)
    nlp = submit(service, "nlp", 6)

    first = scheduler(home, 0)
    # By weight (3:1) vision would get 6 of the 8 GPUs, but its quota is 5: nlp gets the other 3.
    assert len(running(vision)) == 5 and len(running(nlp)) == 3 and first["scaled"] == []
    assert len(first["started"]) == 8

    # An nlp job ends. vision has work waiting and the higher weight, but holds its quota: nlp gets the GPU.
    finish(home, running(nlp)[0], minutes=5)
    second = scheduler(home, 6)
    assert len(second["started"]) == 1 and second["started"][0] in nlp
    assert len(running(vision)) == 5 and len(running(nlp)) == 3

    # A vision job ends: the GPU goes back to vision, which is below its quota again.
    finish(home, running(vision)[0], minutes=10)
    third = scheduler(home, 11)
    assert len(third["started"]) == 1 and third["started"][0] in vision


def test_within_a_team_the_higher_priority_starts_first(world):
    home, service = world
    routine = submit(service, "nlp", 8, priority=3)
    urgent = submit(service, "nlp", 2, priority=8)  # submitted later
    first = scheduler(home, 0)
    assert set(urgent) <= set(first["started"]) and len(first["started"]) == 8
    assert len([j for j in routine if ledger().get(j).state == L.QUEUED]) == 2


def test_each_teams_decayed_use_is_kept_in_the_ledger_and_never_listed_as_a_job(world):
    home, service = world
    submit(service, "vision", 2)
    submit(service, "nlp", 2)
    scheduler(home, 0)  # nothing held yet: the use starts at zero
    assert teams.read_usage(ledger().dynamodb, ledger().table) == ({}, (NOW).timestamp())
    scheduler(home, 60)  # an hour later, both teams have held 2 GPUs (the half-life is an hour)
    usage, at = teams.read_usage(ledger().dynamodb, ledger().table)
    assert at == (NOW + timedelta(minutes=60)).timestamp()
    assert usage == pytest.approx({"vision": 1.0, "nlp": 1.0})
    listed = [r.job_id for state in L.STATES for r in ledger().by_state(state)]
    assert teams.USAGE_KEY not in listed and len(listed) == 4
    # A run with an older clock (a late one) does not replace the newer value.
    assert not teams.write_usage(ledger().dynamodb, ledger().table, {"vision": 9.0}, NOW.timestamp())
    assert teams.read_usage(ledger().dynamodb, ledger().table)[0] == pytest.approx({"vision": 1.0, "nlp": 1.0})


@pytest.mark.parametrize("text, fragment", [
    ("{", "/mlfleet/dev/teams is not JSON"),
    (json.dumps({"teams": {}}), "must be an object of teams, default_team and share_half_life_minutes"),
    (teams_json({"a": (0, None)}), "/mlfleet/dev/teams: teams.a.weight=0: must be a number > 0"),
    (teams_json({"a": (1, 0)}), "/mlfleet/dev/teams: teams.a.max_gpus=0: must be null or an integer >= 1"),
    (teams_json({"a": (1, None)}, default_team="b"), "/mlfleet/dev/teams: default_team='b': not one of the teams"),
    (teams_json(half_life_minutes=-1), "share_half_life_minutes=-1: must be a number >= 0"),
])
def test_a_bad_teams_parameter_is_one_error_naming_the_entry(text, fragment):
    with pytest.raises(team_policies.SettingsError) as error:
        team_policies.parse_teams(text, team_policies.parameter_name(ENV))
    assert fragment in str(error.value)


def test_a_malformed_teams_parameter_holds_starts_for_the_run_and_names_the_entry(world):
    """Placing without the quotas would break them, so nothing starts or is bought; the run itself goes on
    (one bad record never stops the fleet), and the jobs start once the parameter is mended."""
    home, service = world
    job_ids = submit(service, "vision", 2)
    set_teams(teams_json({"vision": (0, None)}))
    summary = scheduler(home, 0)
    assert summary["started"] == [] and summary["scaled"] == []
    (error,) = [e for e in summary["errors"] if e["decision"] == "read-teams-failed"]
    assert "teams.vision.weight=0" in error["error"]
    assert {ledger().get(j).state for j in job_ids} == {L.QUEUED}
    set_teams(TEAMS)
    assert sorted(scheduler(home, 1)["started"]) == sorted(job_ids)


def test_a_missing_teams_parameter_holds_starts_for_the_run_and_says_how_to_mend_it(world):
    home, service = world
    job_ids = submit(service, "vision", 2)
    boto3.client("ssm", HOME).delete_parameter(Name=team_policies.parameter_name(ENV))
    summary = scheduler(home, 0)
    assert summary["started"] == []
    assert any("parameter /mlfleet/dev/teams does not exist; run `pulumi up`" in e["error"]
               for e in summary["errors"] if e["decision"] == "read-teams-failed")
    assert {ledger().get(j).state for j in job_ids} == {L.QUEUED}


def test_jobs_of_a_team_the_config_no_longer_lists_count_for_the_default_team():
    settings = team_policies.parse_teams(teams_json({"vision": (1, 4), "nlp": (1, None)}, default_team="nlp"))
    assert (settings.team_of("vision"), settings.team_of("gone"), settings.team_of(None)) == ("vision", "nlp", "nlp")
    unlisted = team_policies.parse_teams(teams_json({"vision": (1, 4)}))
    assert (unlisted.default_team, unlisted.team_of("gone")) == (None, "default")


def submit_at(service, team: str | None, count: int, minutes: int) -> list[str]:
    document = {**JOB, **({"team": team} if team else {})}
    return list(cli.submit(service, document, sweep={"seed": [str(n) for n in range(count)]},
                           now=NOW + timedelta(minutes=minutes)).job_ids)


def test_jobs_of_no_team_and_of_a_team_renamed_away_are_planned_behind_a_listed_team_s_backlog(world, monkeypatch,
                                                                                               caplog):
    """"A queued job of no team, or of a team the config no longer lists (renamed, removed), runs as the default
    team's": a run reads them as the default team's part of what it plans (handler.read_pending), from the
    by-team index, under no team or the name an earlier run saw listed. Before, they were read only among the
    oldest of all, which a listed team's older backlog filled: with vision at its quota, nothing started."""
    home, service = world
    set_teams(teams_json({"vision": (3.0, 5), "nlp": (1.0, None), "speech": (1.0, None)}))
    vision = submit_at(service, "vision", 8, minutes=0)
    scheduler(home, 1)
    assert len(running(vision)) == 5  # at its quota; three wait, older than what follows
    speech = submit_at(service, "speech", 1, minutes=2)
    set_teams(TEAMS)  # speech is renamed away: vision and nlp are listed
    nobody = submit_at(service, None, 1, minutes=3)
    monkeypatch.setattr(handler, "MAX_PENDING", 6)  # a part of 2 each for vision, nlp and the default team

    summary = scheduler(home, 4)

    assert sorted(summary["started"]) == sorted(speech + nobody) and summary["pending"] <= 6
    assert "speech" in teams.read_kept(ledger().dynamodb, ledger().table).seen
    (line,) = [json.loads(r.getMessage()) for r in caplog.records if '"unlisted-team-jobs"' in r.getMessage()][-1:]
    assert (line["jobs"], line["as_team"]) == ({"(no team)": 1, "speech": 1}, "default")
