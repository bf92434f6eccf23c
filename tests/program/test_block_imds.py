"""The rule that keeps bridge-mode job containers off the instance metadata service survives a reboot.

User data runs once and iptables rules live in memory, so the user data installs a systemd unit that
applies the rule at every boot, before Docker. Checked here: the unit as the rendered user data writes
it (ordering, install targets, the command), systemd's own parser where it is installed
(`systemd-analyze verify`), the script run twice against a stand-in iptables (idempotent), and
shellcheck over the rendered user data.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from components.compute.fleet import BLOCK_IMDS_SCRIPT, BLOCK_IMDS_UNIT, render_user_data

RULE = ["-i", "docker+", "-d", "169.254.169.254/32", "-j", "DROP"]
SCRIPT_PATH = "/usr/local/sbin/mlfleet-block-imds"
UNIT_PATH = "/etc/systemd/system/mlfleet-block-imds.service"


@pytest.fixture(scope="module")
def user_data() -> str:
    return render_user_data("mlfleet-prod", "prod", "gpu1")


def heredoc(script: str, target: str) -> str:
    """The body of `cat > <target> <<'MARK' ... MARK` in a shell script."""
    match = re.search(rf"^cat > {re.escape(target)} <<'(\w+)'\n(.*?)\n\1$", script, re.S | re.M)
    assert match, f"the user data writes no {target}"
    return match[2]


def parse_unit(text: str) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None, comment_prefixes=("#", ";"))
    unit.optionxform = str  # systemd keys are case-sensitive
    unit.read_string(text)
    return unit


def unit_problems(text: str) -> list[str]:
    """What keeps the unit from applying the rule at every boot before Docker (systemd.unit(5))."""
    unit = parse_unit(text)

    def values(section: str, key: str) -> list[str]:
        return unit[section].get(key, "").split() if unit.has_section(section) else []

    problems = []
    if "docker.service" not in values("Unit", "Before"):
        problems.append("not ordered Before=docker.service")
    if values("Service", "Type") != ["oneshot"] or values("Service", "RemainAfterExit") != ["yes"]:
        problems.append("not a oneshot that stays active")
    if values("Service", "ExecStart") != [SCRIPT_PATH]:
        problems.append(f"does not run {SCRIPT_PATH}")
    if "multi-user.target" not in values("Install", "WantedBy"):
        problems.append("not wanted by multi-user.target: not started at boot")
    if "docker.service" not in values("Install", "RequiredBy"):
        problems.append("Docker starts without the rule")
    return problems


def test_the_unit_runs_before_docker_at_every_boot(user_data):
    assert unit_problems(heredoc(user_data, UNIT_PATH)) == []


@pytest.mark.parametrize(("old", "new", "problem"), [
    ("Before=docker.service", "After=docker.service", "Before=docker.service"),
    ("WantedBy=multi-user.target", "WantedBy=default.targets", "multi-user.target"),
    ("RequiredBy=docker.service", "", "Docker starts without the rule"),
    ("Type=oneshot", "Type=simple", "oneshot"),
])
def test_a_broken_unit_is_found(old, new, problem):
    text = BLOCK_IMDS_UNIT.read_text()
    assert old in text
    (found,) = unit_problems(text.replace(old, new))
    assert problem in found


def test_the_user_data_writes_enables_and_starts_the_unit(user_data):
    assert heredoc(user_data, SCRIPT_PATH) == BLOCK_IMDS_SCRIPT.read_text().rstrip("\n")
    assert heredoc(user_data, UNIT_PATH) == BLOCK_IMDS_UNIT.read_text().rstrip("\n")
    lines = user_data.splitlines()
    order = [lines.index(line) for line in (f"chmod 0755 {SCRIPT_PATH}", "systemctl daemon-reload",
                                            "systemctl enable --now mlfleet-block-imds.service")]
    assert order == sorted(order)
    assert lines.index(f"cat > {SCRIPT_PATH} <<'BLOCKIMDS'") < order[0]
    assert lines.index(f"cat > {UNIT_PATH} <<'UNIT'") < order[1]
    outside = user_data.replace(heredoc(user_data, SCRIPT_PATH), "")
    assert "iptables" not in "\n".join(line for line in outside.splitlines() if not line.startswith("#")), \
        "the rule is applied by the unit's script only"


def test_systemd_accepts_the_unit(tmp_path):
    """systemd's own parser, where this machine has it (it reports unknown keys and sections)."""
    unit_text = BLOCK_IMDS_UNIT.read_text()
    assert f"ExecStart={SCRIPT_PATH}\n" in unit_text
    script = tmp_path / "mlfleet-block-imds"
    shutil.copy(BLOCK_IMDS_SCRIPT, script)
    script.chmod(0o755)
    unit = tmp_path / "mlfleet-block-imds.service"
    unit.write_text(unit_text.replace(SCRIPT_PATH, str(script)))
    parse_unit(unit_text)  # the same file as the user data writes, parsed as INI everywhere
    if shutil.which("systemd-analyze"):
        result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
        assert (result.returncode, result.stderr) == (0, "")


FAKE_IPTABLES = textwrap.dedent("""\
    #!{python}
    # A stand-in for iptables -w over one JSON file: -L/-N/-C/-I on chains of rules, iptables' exit codes.
    import json, os, sys
    path = os.environ["FAKE_IPTABLES_STATE"]
    chains = json.load(open(path)) if os.path.exists(path) else {{}}
    args = [a for a in sys.argv[1:] if a not in ("-w", "-n")]
    command, chain, rule = args[0], args[1], args[2:]
    if command == "-L":
        sys.exit(0 if chain in chains else 1)
    if command == "-N":
        if chain in chains:
            sys.exit(1)
        chains[chain] = []
    elif command == "-C":
        sys.exit(0 if rule in chains.get(chain, []) else 1)
    elif command == "-I":
        if chain not in chains:
            sys.exit(1)
        position, rule = int(rule[0]), rule[1:]
        chains[chain].insert(position - 1, rule)
    json.dump(chains, open(path, "w"))
""")


def run_script(tmp_path: Path, state: dict | None = None) -> dict:
    import json

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "iptables"
    fake.write_text(FAKE_IPTABLES.format(python=sys.executable))
    fake.chmod(0o755)
    state_file = tmp_path / "iptables.json"
    if state is not None and not state_file.exists():
        state_file.write_text(json.dumps(state))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_IPTABLES_STATE": str(state_file)}
    subprocess.run(["bash", str(BLOCK_IMDS_SCRIPT)], env=env, check=True)
    return json.loads(state_file.read_text())


def test_the_rule_is_applied_once_however_often_the_script_runs(tmp_path):
    first = run_script(tmp_path)
    assert first == {"DOCKER-USER": [RULE]}
    assert run_script(tmp_path) == first  # the second boot, or the user data after the unit


def test_the_rule_goes_first_in_a_chain_docker_already_filled(tmp_path):
    docker_return = ["-j", "RETURN"]
    state = run_script(tmp_path, {"DOCKER-USER": [docker_return], "FORWARD": [["-j", "DOCKER-USER"]]})
    assert state["DOCKER-USER"] == [RULE, docker_return]
    assert run_script(tmp_path)["DOCKER-USER"] == [RULE, docker_return]


def test_the_fake_iptables_refuses_what_iptables_refuses(tmp_path):
    """The stand-in must fail like iptables does, or the idempotence test above proves nothing."""
    run_script(tmp_path)
    env = {**os.environ, "FAKE_IPTABLES_STATE": str(tmp_path / "iptables.json")}
    fake = str(tmp_path / "bin" / "iptables")
    assert subprocess.run([fake, "-w", "-N", "DOCKER-USER"], env=env).returncode == 1
    assert subprocess.run([fake, "-w", "-C", "DOCKER-USER", "-j", "ACCEPT"], env=env).returncode == 1
    assert subprocess.run([fake, "-w", "-I", "NOPE", "1", "-j", "DROP"], env=env).returncode == 1


def test_the_rendered_user_data_is_shellcheck_clean(user_data, tmp_path):
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is missing: apt-get install shellcheck (README, Prerequisites)")
    rendered = tmp_path / "user_data.sh"
    rendered.write_text(user_data)
    embedded = tmp_path / "mlfleet-block-imds"
    embedded.write_text(heredoc(user_data, SCRIPT_PATH) + "\n")
    result = subprocess.run(["shellcheck", str(rendered), str(embedded)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
