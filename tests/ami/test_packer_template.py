"""The Packer build, parsed with python-hcl2: what matters is pinned, safe, tagged and validated."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess

import pytest

from ami.conftest import PACKER

SCRIPTS = PACKER / "scripts"
REPO = PACKER.parent


def regex_of(variable: dict) -> re.Pattern:
    """The pattern of a `can(regex("PATTERN", var.x))` validation, with HCL string escapes undone."""
    (validation,) = variable["validation"]
    match = re.search(r'regex\("((?:[^"\\]|\\.)*)"', validation["condition"])
    assert match, validation["condition"]
    return re.compile(match.group(1).replace("\\\\", "\\").replace('\\"', '"'))


def provisioners(build: dict) -> list[tuple[str, dict]]:
    return [(kind, body) for item in build["provisioner"] for kind, body in item.items()]


def script_names(build: dict) -> list[str]:
    return [body["script"].removeprefix("${path.root}/scripts/") for kind, body in provisioners(build) if kind == "shell"]


def test_plugin_and_packer_pinned(template):
    (packer,) = template["packer"]
    assert re.fullmatch(r">= 1\.\d+\.\d+, < 2\.0\.0", packer["required_version"])
    (plugins,) = packer["required_plugins"]
    assert plugins["amazon"]["source"] == "github.com/hashicorp/amazon"
    assert re.fullmatch(r"= \d+\.\d+\.\d+", plugins["amazon"]["version"]), "exact pin, not a range"


def test_every_variable_is_typed_described_and_validated(variables):
    assert variables
    for name, body in variables.items():
        assert body.get("type"), f"{name} has no type"
        assert len(body.get("description", "")) > 20, f"{name} has no useful description"
        assert body.get("validation"), f"{name} accepts any value"
        (validation,) = body["validation"]
        assert name in validation["error_message"], f"{name}'s error message names the variable"


def test_versions_file_is_the_one_place_for_versions(variables, pinned_versions):
    pinned = {"nvidia_driver_version", "cuda_version", "nvidia_container_toolkit_version"}
    assert set(pinned_versions) == pinned
    for name in pinned:
        assert "default" not in variables[name], f"{name} must come from versions.pkrvars.hcl only"
        assert regex_of(variables[name]).search(pinned_versions[name]), f"{name} = {pinned_versions[name]!r}"
    versions_text = (PACKER / "versions.pkrvars.hcl").read_text()
    assert versions_text.count("# -") >= 3, "each pin says where it comes from"


@pytest.mark.parametrize(("variable", "good", "bad"), [
    ("environment", ["dev", "staging", "prod", "team-a", "ml2"], ["Dev", "x", "-a", "a" * 17, "prod!", "1dev"]),
    ("region", ["us-east-1", "eu-central-1", "us-gov-west-1"], ["us-east", "US-EAST-1", "useast1"]),
    ("base_ami_id", ["", "ami-0123456789abcdef0", "ami-12345678"], ["ami-XYZ", "0123", "ami-"]),
    ("git_revision", ["0123abc", "a" * 40], ["HEAD", "0123ab", "A" * 40]),
    ("instance_type", ["g4dn.xlarge", "g5.12xlarge", "p5.48xlarge"], ["t3.micro", "m5.large", "g4dn"]),
    ("nvidia_driver_version", ["580.178.04", "570.86.15", "550.127"], ["580", "latest", "580.178.04.1"]),
    ("cuda_version", ["13.2.0", "12.8.1"], ["13.2", "13", "cuda-13.2.0"]),
    ("subnet_id", ["", "subnet-0123456789abcdef0"], ["subnet-", "sg-0123456789abcdef0"]),
])
def test_validations_accept_and_reject(variables, variable, good, bad):
    pattern = regex_of(variables[variable])
    empty_allowed = '== ""' in variables[variable]["validation"][0]["condition"]
    for value in good:
        assert (value == "" and empty_allowed) or pattern.search(value), f"{variable} rejects {value!r}"
    for value in bad:
        assert not pattern.search(value), f"{variable} accepts {value!r}"


def test_default_base_filter_finds_the_ecs_gpu_al2023_ami(variables, source):
    # Real name from github.com/aws/amazon-ecs-ami/releases/tag/20261113.
    real = "al2023-ami-ecs-gpu-hvm-2023.0.20261113-kernel-6.1-x86_64-ebs"
    default = variables["base_ami_name_filter"]["default"]
    assert fnmatch.fnmatchcase(real, default)
    assert not fnmatch.fnmatchcase("al2023-ami-ecs-hvm-2023.0.20261113-kernel-6.1-x86_64", default)
    (dynamic,) = [block for block in source["dynamic"] if "source_ami_filter" in block]
    (content,) = dynamic["source_ami_filter"]["content"]
    assert content["owners"] == ["amazon"] and content["most_recent"] is True
    assert content["filters"]["name"] == "${source_ami_filter.value}"
    assert dynamic["source_ami_filter"]["for_each"] == '${var.base_ami_id == "" ? [var.base_ami_name_filter] : []}'
    assert source["source_ami"] == '${var.base_ami_id == "" ? null : var.base_ami_id}'


def test_build_instance_uses_imdsv2_only(source):
    (metadata,) = source["metadata_options"]
    assert metadata == {"http_endpoint": "enabled", "http_tokens": "required", "http_put_response_hop_limit": 1}
    assert source["imds_support"] == "v2.0"


def test_image_is_encrypted_gp3_and_copied_to_every_stack_region(source):
    assert source["encrypt_boot"] is True
    assert source["ami_regions"] == "${var.ami_regions}"
    assert source["region"] == "${var.region}"
    (root,) = source["launch_block_device_mappings"]
    assert root["volume_type"] == "gp3" and root["encrypted"] is True
    assert root["volume_size"] == "${var.root_volume_gib}"
    assert source["region_kms_key_ids"] == "${var.region_kms_key_ids}"


def test_the_temporary_ssh_key_leaves_no_trace(source):
    # Who may reach SSH, in each way of connecting: tests/ami/test_private_build.py.
    assert source["temporary_key_pair_type"] == "ed25519"
    assert source["ssh_clear_authorized_keys"] is True


def test_tags_name_environment_versions_base_and_revision(source, locals_):
    # The Pulumi AMI component looks up owners=["self"], tag:mlfleet:environment=<env>,
    # tag:mlfleet:managed-by=packer; packer.ami_clean filters on the same two tags.
    assert source["tags"] == source["snapshot_tags"] == "${local.image_tags}"
    tags = locals_["image_tags"]
    assert tags["mlfleet:environment"] == "${var.environment}"
    assert tags["mlfleet:managed-by"] == "packer"
    assert tags["mlfleet:image"] == "gpu"
    assert tags["mlfleet:nvidia-driver"] == "${var.nvidia_driver_version}"
    assert tags["mlfleet:cuda"] == "${var.cuda_version}"
    assert tags["mlfleet:nvidia-container-toolkit"] == "${var.nvidia_container_toolkit_version}"
    assert tags["mlfleet:base-ami"] == "{{ .SourceAMI }}"
    assert tags["mlfleet:git-revision"] == "${var.git_revision}"
    assert source["run_tags"]["mlfleet:managed-by"] == "packer"


def test_every_script_exists_and_runs_once_in_order(build):
    names = script_names(build)
    assert sorted(names) == sorted(path.name for path in SCRIPTS.glob("*.sh")), "every script runs, none is missing"
    assert len(names) == len(set(names))
    assert names[-2:] == ["validate.sh", "99-cleanup.sh"], "validation runs last, right before clean-up"
    numbered = names[:-2]
    assert numbered == sorted(numbered) and all(re.fullmatch(r"\d\d-[a-z0-9-]+\.sh", name) for name in numbered)
    (first_kind, first), *_ = provisioners(build)
    assert first_kind == "file" and (PACKER / "files").is_dir() and first["source"] == "${path.root}/files/"


def test_scripts_take_inputs_from_packer_and_run_as_root(build, locals_):
    provided = {entry.split("=", 1)[0] for entry in locals_["script_env"]}
    assert locals_["execute_command"].startswith("chmod +x {{ .Path }}; sudo -n env {{ .Vars }}")
    for kind, body in provisioners(build):
        if kind != "shell":
            continue
        assert body["environment_vars"] == "${local.script_env}"
        assert body["execute_command"] == "${local.execute_command}"
        text = (SCRIPTS / body["script"].removeprefix("${path.root}/scripts/")).read_text()
        needed = set(re.findall(r'\$\{([A-Z_]+):[?=]', text))
        assert needed <= provided, f"{body['script']} reads {needed - provided} that Packer does not pass"


def test_reboot_is_expected_and_followed_by_a_pause(build):
    steps = [body for kind, body in provisioners(build) if kind == "shell"]
    reboot = next(index for index, body in enumerate(steps) if body["script"].endswith("60-reboot.sh"))
    assert steps[reboot]["expect_disconnect"] is True
    assert re.fullmatch(r"\d+s", steps[reboot + 1]["pause_before"])


@pytest.mark.parametrize("script", sorted(SCRIPTS.glob("*.sh")), ids=lambda path: path.name)
def test_script_header(script):
    lines = script.read_text().splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines[:12]


def test_shellcheck_clean():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (CI installs it; apt-get install shellcheck)")
    scripts = sorted(str(path) for path in PACKER.rglob("*.sh"))
    result = subprocess.run(["shellcheck", "-x", *scripts], capture_output=True, text=True, cwd=SCRIPTS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_manifest_post_processor_records_ami_per_region(build):
    (post_processor,) = build["post-processor"]
    manifest = post_processor["manifest"]
    assert manifest["output"] == "${path.root}/manifest.json"
    assert manifest["custom_data"]["environment"] == "${var.environment}"
    assert manifest["custom_data"]["git_revision"] == "${var.git_revision}"
    assert manifest["custom_data"]["nvidia_driver"] == "${var.nvidia_driver_version}"
    assert manifest["custom_data"]["cuda"] == "${var.cuda_version}"
    # A record of the build; the stack holds mlfleet:rootVolumeGiB to the snapshot EC2 describes
    # (components/program.py check_images).
    assert manifest["custom_data"]["root_volume_gib"] == "${var.root_volume_gib}"
    ignored = subprocess.run(["git", "check-ignore", "-q", "packer/manifest.json"], cwd=REPO)
    assert ignored.returncode == 0, "packer/manifest.json is a local build output and must be gitignored"


def test_cloudwatch_agent_publishes_what_the_reaper_and_idle_alarm_query():
    config = json.loads((PACKER / "files" / "cloudwatch" / "amazon-cloudwatch-agent.json").read_text())
    metrics = config["metrics"]
    assert metrics["namespace"] == "CWAgent"
    gpu = metrics["metrics_collected"]["nvidia_gpu"]["measurement"]
    # The agent publishes nvidia_gpu <measurement> as nvidia_smi_<measurement>.
    assert {"utilization_gpu", "utilization_memory", "memory_used", "memory_total"} <= set(gpu)
    assert {"cpu", "mem", "disk"} <= set(metrics["metrics_collected"])
    assert metrics["append_dimensions"] == {"InstanceId": "${aws:InstanceId}", "InstanceType": "${aws:InstanceType}",
                                            "AutoScalingGroupName": "${aws:AutoScalingGroupName}"}
    # nvidia_smi_utilization_gpu with exactly {InstanceId, AutoScalingGroupName} (reaper, fleet members),
    # {AutoScalingGroupName} (fleet idle alarm) and {InstanceId} (reaper, standalone machines: no group, so no
    # AutoScalingGroupName dimension; tests/reaper/test_metric_dimensions.py).
    assert metrics["aggregation_dimensions"] == [["InstanceId", "AutoScalingGroupName"], ["AutoScalingGroupName"],
                                                 ["InstanceId"]]
    unit = (PACKER / "files" / "systemd" / "mlfleet-cloudwatch-agent.service").read_text()
    assert "fetch-config -m ec2 -s -c file:/opt/aws/amazon-cloudwatch-agent/etc/mlfleet.json" in unit


def test_network_sysctls_cover_large_downloads():
    settings = {}
    for line in (PACKER / "files" / "sysctl" / "90-mlfleet-network.conf").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = (part.strip() for part in line.split("=", 1))
            settings[key] = value
    assert int(settings["net.core.rmem_max"]) >= 64 * 2**20 and int(settings["net.core.wmem_max"]) >= 64 * 2**20
    assert settings["net.ipv4.tcp_rmem"].split()[-1] == settings["net.core.rmem_max"]
    assert settings["net.ipv4.tcp_wmem"].split()[-1] == settings["net.core.wmem_max"]
    assert int(settings["net.core.netdev_max_backlog"]) > 1000
    assert settings["net.ipv4.tcp_congestion_control"] == "bbr"
    assert "tcp_bbr" in (PACKER / "files" / "modules-load" / "mlfleet-bbr.conf").read_text()


def test_open_file_limits_cover_users_daemons_and_containers(variables):
    tuning = (SCRIPTS / "40-os-tuning.sh").read_text()
    assert "/etc/security/limits.d/" in tuning and "root soft nofile" in tuning
    assert "LimitNOFILE=${OPEN_FILES_LIMIT}" in tuning
    assert '"default-ulimits"' in tuning
    assert variables["open_files_limit"]["default"] >= 65536


def test_ecs_agent_gpu_and_spot_draining_defaults():
    ecs = (SCRIPTS / "30-ecs-agent.sh").read_text()
    assert "set_default ECS_ENABLE_GPU_SUPPORT true" in ecs
    assert "set_default ECS_ENABLE_SPOT_INSTANCE_DRAINING true" in ecs


def test_top_level_packer_package_is_ours():
    import packer

    assert packer.__file__ == str(PACKER / "__init__.py"), "another installed package named packer would shadow ours"


def test_the_image_enables_what_the_ecs_agent_needs_to_share_gpus():
    # amazon-ecs-agent advertises ecs.capability.gpu-sharing-mps only with the MPS control binary present and
    # nvidia-mps.service enabled (agent/gpu/nvidia_gpu_manager.go); the unit is the ECS GPU AMI's.
    unit = (PACKER / "files" / "systemd" / "nvidia-mps.service").read_text()
    assert "ExecStart=/usr/bin/nvidia-cuda-mps-control -f" in unit and "Before=ecs.service" in unit
    assert "WantedBy=multi-user.target" in unit
    ecs = (SCRIPTS / "30-ecs-agent.sh").read_text()
    assert 'install -m 0644 "${FILES_DIR}/systemd/nvidia-mps.service" /etc/systemd/system/' in ecs
    assert "systemctl enable nvidia-mps.service" in ecs
    assert 'check "GPU sharing: ECS agent' in (SCRIPTS / "validate.sh").read_text()


@pytest.mark.parametrize(("agent", "enabled", "binary", "passes"), [
    ("1.107.0", "enabled", True, True), ("1.112.3", "enabled", True, True), ("1.106.9", "enabled", True, False),
    ("1.99.0", "enabled", True, False), ("1.107.0", "disabled", True, False), ("1.107.0", "enabled", False, False),
])
def test_validation_of_gpu_sharing_fails_on_an_old_agent_or_a_disabled_daemon(tmp_path, agent, enabled, binary, passes):
    script = (SCRIPTS / "validate.sh").read_text()
    start = script.index("readonly MPS_AGENT_MIN_VERSION")
    function = script[start:script.index("images_present() {")]
    equals = script[script.index("equals() {"):script.index("driver_matches() {")]
    control = tmp_path / "nvidia-cuda-mps-control"
    if binary:
        control.write_text("#!/bin/sh\n")
        control.chmod(0o755)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "rpm").write_text(f"#!/bin/sh\nprintf %s {agent}\n")
    (stubs / "systemctl").write_text(f'#!/bin/sh\n[ "$1" = is-enabled ] && {{ echo {enabled}; '
                                     f'[ {enabled} = enabled ]; exit $?; }}\nexit 0\n')
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    body = equals + function.replace("/usr/bin/nvidia-cuda-mps-control", str(control)) + "gpu_sharing_ready\n"
    result = subprocess.run(["bash", "-c", body], capture_output=True, text=True,
                            env={"PATH": f"{stubs}:/usr/bin:/bin"})
    assert (result.returncode == 0) is passes, result.stdout + result.stderr


@pytest.mark.parametrize(("installed", "passes"), [
    (["6.1.100-1.amzn2023.x86_64"], True),
    # kernel is an installonly package (dnf.conf(5) installonlypkgs): an update installs a second kernel
    # next to the running one, which stays installed, and the boot default moves to it, so the next boot
    # leaves the NVIDIA modules prebuilt for the running kernel behind.
    (["6.1.100-1.amzn2023.x86_64", "6.1.200-2.amzn2023.x86_64"], False),
    (["6.1.200-2.amzn2023.x86_64"], False),
])
def test_os_updates_fail_when_a_kernel_update_slipped_through(tmp_path, installed, passes):
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "dnf").write_text("#!/bin/sh\nexit 0\n")
    (stubs / "systemctl").write_text("#!/bin/sh\nexit 0\n")
    (stubs / "uname").write_text("#!/bin/sh\necho 6.1.100-1.amzn2023.x86_64\n")
    (stubs / "rpm").write_text("#!/bin/sh\nprintf '%s\\n' " + " ".join(installed) + "\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    result = subprocess.run(["bash", str(SCRIPTS / "10-os-updates.sh")], capture_output=True, text=True,
                            env={"PATH": f"{stubs}:/usr/bin:/bin"})
    assert (result.returncode == 0) is passes, result.stdout + result.stderr


def test_cleanup_removes_the_build_instances_gpu_inventory():
    # ecs-init writes the GPUs it finds (their UUIDs, the driver, the MPS facts) to
    # /var/lib/ecs/gpu/nvidia-gpu-info.json at every start with ECS_ENABLE_GPU_SUPPORT=true, and rewrites
    # it only when it finds /dev/nvidia* (ecs-init/gpu/nvidia_gpu_manager.go Setup: ErrNoGPUDeviceFound
    # returns before SaveGPUState); the agent registers whatever the file holds whenever it exists
    # (agent/gpu/nvidia_gpu_manager.go Initialize). The build instance has GPUs, so the image must not
    # keep its inventory.
    cleanup = (SCRIPTS / "99-cleanup.sh").read_text()
    removals = [line for line in cleanup.splitlines() if line.startswith("rm ")]
    assert any("/var/lib/ecs/gpu/nvidia-gpu-info.json" in line for line in removals), removals
    assert "/var/lib/ecs/data/*" in " ".join(removals)
