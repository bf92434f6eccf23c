"""What the program hands the two removing functions, read back by the functions' own settings parsers:
a setting the component forgets, or one the handler does not understand, fails here, not in AWS."""

from __future__ import annotations

import json

import pytest
from pulumi_harness import committed_rendering, render_stack

from lambdas.common.settings import SettingsError, from_env
from lambdas.reaper.handler import Settings as ReaperSettings
from lambdas.scheduler.handler import Settings as SchedulerSettings

FUNCTION = "aws:lambda/function:Function"


@pytest.fixture(scope="module")
def prod():
    """prod: three fleet regions, home us-east-1; the release delay and budget set away from their defaults."""
    return render_stack("prod", releaseAfterEmptyMinutes=7, disruptionBudgetPercent=25)


def environments(rendering, suffix: str) -> dict[str, dict]:
    return {f.name: f.inputs["environment"]["variables"] for f in rendering.of_type(FUNCTION) if f.name.endswith(suffix)}


def test_every_reaper_takes_the_lease_from_the_home_region_s_ledger_with_the_stack_s_budget(prod):
    reapers = environments(prod, "-reaper-function-function")
    assert len(reapers) == 3
    for name, variables in reapers.items():
        settings = from_env(ReaperSettings, {k: str(v) for k, v in variables.items()})
        assert (settings.home_region, settings.jobs_table) == ("us-east-1", "mlfleet-prod-jobs"), name
        assert settings.disruption_budget_percent == 25


def test_the_scheduler_gets_the_release_delay_and_budget(prod):
    (variables,) = environments(prod, "-scheduler-function").values()
    assert variables["RELEASE_AFTER_EMPTY_MINUTES"] == "7" and variables["DISRUPTION_BUDGET_PERCENT"] == "25"
    assert {"release_after_empty_minutes", "disruption_budget_percent"} <= set(SchedulerSettings.__dataclass_fields__)


def test_a_release_delay_of_zero_reaches_the_scheduler_as_zero():
    (variables,) = environments(render_stack("dev", releaseAfterEmptyMinutes=0), "-scheduler-function").values()
    assert variables["RELEASE_AFTER_EMPTY_MINUTES"] == "0"
    settings = from_env(SchedulerSettings, {k: v if isinstance(v, str) else json.dumps(v) for k, v in variables.items()})
    assert settings.release_after_empty_minutes == 0


def test_an_unset_release_delay_is_left_out_so_the_scheduler_measures_it():
    (variables,) = environments(committed_rendering("dev"), "-scheduler-function").values()
    assert "RELEASE_AFTER_EMPTY_MINUTES" not in variables and variables["DISRUPTION_BUDGET_PERCENT"] == "10"


def test_headroom_reaches_the_scheduler_only_when_the_stack_turns_it_on():
    (variables,) = environments(render_stack("staging", headroomWindowMinutes=240, headroomMaxJobs=4),
                                "-scheduler-function").values()
    settings = from_env(SchedulerSettings, {k: str(v) for k, v in variables.items()})
    assert (settings.headroom_window_minutes, settings.headroom_max_jobs) == (240, 4)
    (default,) = environments(committed_rendering("dev"), "-scheduler-function").values()
    assert not {"HEADROOM_WINDOW_MINUTES", "HEADROOM_MAX_JOBS"} & set(default)
    assert from_env(SchedulerSettings, {k: str(v) for k, v in default.items()}).headroom_window_minutes == 0


def test_a_lower_purchase_search_reaches_the_scheduler_only_when_the_stack_sets_one():
    (variables,) = environments(render_stack("staging", purchaseSearchCpuSeconds=5), "-scheduler-function").values()
    assert from_env(SchedulerSettings, {k: str(v) for k, v in variables.items()}).purchase_search_cpu_seconds == 5
    (default,) = environments(committed_rendering("dev"), "-scheduler-function").values()
    assert "PURCHASE_SEARCH_CPU_SECONDS" not in default
    assert from_env(SchedulerSettings, {k: str(v) for k, v in default.items()}).purchase_search_cpu_seconds == 30


@pytest.mark.parametrize("name, value", [("DISRUPTION_BUDGET_PERCENT", "0"), ("DISRUPTION_BUDGET_PERCENT", "101"),
                                         ("DISRUPTION_BUDGET_PERCENT", "ten")])
def test_a_bad_budget_in_the_reaper_s_environment_is_one_clear_error(prod, name, value):
    variables = {k: str(v) for k, v in next(iter(environments(prod, "-reaper-function-function").values())).items()}
    with pytest.raises(SettingsError, match=f"{name}=.?{value}"):
        from_env(ReaperSettings, {**variables, name: value})


def test_a_reaper_without_the_ledger_is_refused_naming_what_is_missing(prod):
    variables = {k: str(v) for k, v in next(iter(environments(prod, "-reaper-function-function").values())).items()}
    del variables["JOBS_TABLE"], variables["HOME_REGION"]
    with pytest.raises(SettingsError, match="JOBS_TABLE, HOME_REGION"):
        from_env(ReaperSettings, variables)


@pytest.mark.parametrize("name, value, message", [
    ("DISRUPTION_BUDGET_PERCENT", "0", "DISRUPTION_BUDGET_PERCENT=0: must be 1 to 100"),
    ("RELEASE_AFTER_EMPTY_MINUTES", "-1", "RELEASE_AFTER_EMPTY_MINUTES=-1: must be 0 .at the first run that finds it empty. or more"),
    ("RELEASE_AFTER_EMPTY_MINUTES", "soon", "RELEASE_AFTER_EMPTY_MINUTES='soon' is not an int"),
    ("HEADROOM_WINDOW_MINUTES", "-1", "HEADROOM_WINDOW_MINUTES=-1: must be 0 .no headroom. to 1440"),
    ("HEADROOM_MAX_JOBS", "0", "HEADROOM_MAX_JOBS=0: must be 1 to 100"),
    ("PURCHASE_SEARCH_CPU_SECONDS", "31", "PURCHASE_SEARCH_CPU_SECONDS=31.0: must be 0 .the greedy plan alone. to 30"),
    ("PURCHASE_SEARCH_CPU_SECONDS", "-1", "PURCHASE_SEARCH_CPU_SECONDS=-1.0: must be 0"),
])
def test_a_bad_release_setting_in_the_scheduler_s_environment_is_one_clear_error(name, value, message):
    base = {"ENVIRONMENT": "dev", "JOBS_TABLE": "t", "JOBS_QUEUE_URL": "q", "JOBS_DLQ_URL": "d",
            "ADMISSION_PARAMETER": "/mlfleet/dev/admission", "FLEETS": "[]", "MAX_HOURLY_USD": "5",
            "ALERT_TOPIC_ARN": "a", "DEFAULT_MAX_ATTEMPTS": "3", "REBALANCE_TIMEOUT_MINUTES": "30", "ACCOUNT_ID": "123456789012"}
    assert from_env(SchedulerSettings, base).release_after_empty_minutes is None
    with pytest.raises(SettingsError, match=message):
        from_env(SchedulerSettings, {**base, name: value})
