"""One scheduler run at scale: 50,000 queued jobs and 2,000 instances, the real handler code, AWS stubbed.

    python -m benchmarks.scheduler_scale [--jobs 50000] [--instances 2000] [--seed 1] [--json]

`lambdas.scheduler.handler.run` runs unchanged; every AWS call is answered at the botocore client
boundary (events on the functions' boto3 session) from an in-memory account: a ledger table with its
by-state index (1 MB pages, as DynamoDB pages), the job queue, ECS clusters with container instances
and running tasks, Auto Scaling groups, EC2 instances, spot prices. JSON-protocol answers (DynamoDB,
ECS, SQS, SSM) go back as JSON bodies that botocore parses, as it parses AWS's; EC2, Auto Scaling and
SNS answers are handed over parsed (their XML parsing is not measured).

What it reports, measured on this machine: wall and CPU seconds of the run (and of planning alone),
peak Python memory (tracemalloc, a second identical run) and the process's peak resident set, and the
AWS calls by operation. The Lambda runs with 1024 MB, which gives it about 0.58 vCPU (Lambda allocates
CPU in proportion to memory, one full vCPU at 1,769 MB:
https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html), and a 180 s timeout
(components/jobs/jobs.py). `lambda_cpu_s` is the CPU seconds scaled to that share; `lambda_s` adds the
calls times the per-call latencies given with --latency-ms (assumed, not measured here: defaults are
typical in-region figures, override them); the run sees that clock through `remaining_ms`, so it stops
acting when the Lambda would, as it does in AWS.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import time
import tracemalloc
from collections import Counter
from datetime import datetime, timedelta, timezone
from urllib.parse import urlparse

from botocore.awsrequest import AWSResponse

# The scheduler Lambda's limits, as components/jobs/jobs.py sets them (SCHEDULER_TIMEOUT_SECONDS,
# SCHEDULER_MEMORY_MIB; tests/benchmarks/test_scheduler_scale.py keeps them equal). Not imported: the
# component pulls in Pulumi, which would count in the measured memory after imports.
LAMBDA_TIMEOUT_S = 180
LAMBDA_MEMORY_MIB = 1024
LAMBDA_VCPU_SHARE = 1024 / 1769  # one vCPU at 1,769 MB (Lambda developer guide, configuration-memory)
ENV = "bench"
ACCOUNT = "123456789012"
NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
REGIONS = ("us-east-1", "us-west-2")
# fleet -> (instance types, share of the instances, GPUs per instance)
FLEETS = {"gpu1": (("g5.xlarge", "g6.xlarge"), 0.5, 1), "gpu4": (("g5.12xlarge", "g6.12xlarge"), 0.35, 4),
          "gpu8": (("g5.48xlarge",), 0.15, 8)}
IMAGES = tuple(f"123456789012.dkr.ecr.us-east-1.amazonaws.com/team/train:{n}" for n in range(5))
DEFAULT_LATENCY_MS = {"dynamodb": 8, "sqs": 10, "ssm": 15, "ecs": 40, "ec2": 60, "autoscaling": 60, "sns": 20}
PAGE_BYTES = 1_000_000  # DynamoDB returns at most 1 MB per Query page


class Refusal(Exception):
    def __init__(self, code: str, message: str = ""):
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


class Raw:
    """What botocore reads a response body from."""

    def __init__(self, body: bytes):
        self.body = body

    def stream(self, **kwargs):
        yield self.body


def _json_default(value):
    if isinstance(value, datetime):
        return value.timestamp()
    raise TypeError(type(value))


# --- the in-memory account -----------------------------------------------------------------------

class Account:
    """Just enough of DynamoDB, SQS, SSM, ECS, EC2, Auto Scaling and SNS for one scheduler run."""

    def __init__(self, jobs: int, instances: int, seed: int, free_share: float = 0.1, submission_jobs: int = 500):
        from lambdas.common.catalog import load_catalog
        from lambdas.jobs import ledger as L
        from lambdas.jobs.spec import assign_ids, parse_spec

        self.rng = random.Random(seed)
        self.catalog = load_catalog()
        self.items: dict[str, dict] = {}  # job_id -> DynamoDB item
        self.queue: list[dict] = []
        self.instances: dict[str, dict] = {}  # instance id -> EC2 instance
        self.container_instances: dict[str, dict] = {}  # ARN -> container instance
        self.tasks: dict[str, dict] = {}  # ARN -> task
        self.groups: dict[str, dict] = {}
        self.definitions: dict[str, dict] = {}
        self.fleets: list[dict] = []
        counter = iter(range(10**9))

        def spec(gpus: int):
            return parse_spec({"image": self.rng.choice(IMAGES), "gpus": gpus, "vcpus": 3 * gpus,
                               "memory_mib": 12_000 * gpus, "environment": {"DATASET": "s3://data/train", "SEED": "1"},
                               "command": ["python", "train.py", "--epochs", "10", "--lr", "0.01"]},
                              fleet_regions=REGIONS, catalog=self.catalog, default_max_attempts=3)

        specs = {g: spec(g) for g in (1, 2, 4, 8)}
        submitted = NOW - timedelta(hours=2)
        for n in range(0, jobs, submission_jobs):  # submissions of `submission_jobs` jobs
            sub = f"sub-20261122{n // submission_jobs:06d}-{n // submission_jobs:06x}"
            mix = [specs[self.rng.choices((1, 2, 4, 8), weights=(60, 15, 20, 5))[0]]
                   for _ in range(min(submission_jobs, jobs - n))]
            for job in assign_ids(sub, mix):
                record = L.new_record(job, submitted.timestamp() + next(counter) / 1000)
                self.items[job.job_id] = L.encode(record)
        queued = list(self.items)
        self.queue = [{"MessageId": f"m{i}", "ReceiptHandle": f"r{i}",
                       "Body": json.dumps({"job_id": job_id, "attempt": 0})} for i, job_id in enumerate(queued[:100])]

        running_sub = "sub-20261122000000-aaaaaa"
        running = 0
        for region in REGIONS:
            cluster = f"mlfleet-{ENV}"
            for fleet, (types, share, gpus) in FLEETS.items():
                count = round(instances / len(REGIONS) * share)
                name = f"mlfleet-{ENV}-{fleet}"
                members = []
                for _ in range(count):
                    instance_id = f"i-{next(counter):017x}"
                    instance_type = self.rng.choice(types)
                    zone = f"{region}{self.rng.choice('abc')}"
                    entry = self.catalog.get(instance_type)
                    self.instances[instance_id] = {
                        "InstanceId": instance_id, "InstanceType": instance_type, "Placement": {"AvailabilityZone": zone},
                        "InstanceLifecycle": "spot", "State": {"Name": "running"},
                        "Tags": [{"Key": "mlfleet:environment", "Value": ENV}, {"Key": "mlfleet:fleet", "Value": fleet}]}
                    members.append({"InstanceId": instance_id, "InstanceType": instance_type, "AvailabilityZone": zone,
                                    "LifecycleState": "InService", "HealthStatus": "Healthy",
                                    "ProtectedFromScaleIn": True})
                    arn = f"arn:aws:ecs:{region}:{ACCOUNT}:container-instance/{cluster}/{next(counter):032x}"
                    # Most machines full; `free_share` of them have room for the run to place onto.
                    used = gpus if self.rng.random() >= free_share else self.rng.randrange(gpus)
                    cpu_free, memory_free = entry.schedulable_vcpus * 1024, entry.schedulable_memory_mib
                    for _ in range(used):
                        job_id = f"{running_sub[:-6]}{running // 100_000:06x}-{running % 100_000:05d}"
                        running += 1
                        task = self._task(region, cluster, arn, job_id, 1, 1, IMAGES[0])
                        self.tasks[task["taskArn"]] = task
                        cpu_free -= 3 * 1024
                        memory_free -= 12_000
                    self.container_instances[arn] = {
                        "containerInstanceArn": arn, "ec2InstanceId": instance_id, "status": "ACTIVE",
                        "agentConnected": True, "region": region, "cluster": cluster,
                        "remainingResources": [{"name": "CPU", "type": "INTEGER", "integerValue": max(0, cpu_free)},
                                               {"name": "MEMORY", "type": "INTEGER", "integerValue": max(0, memory_free)}],
                        # What ECS reports of an agent with GPU support: its GPUs as the STRINGSET "GPU" (botocore's
                        # ecs model, ContainerInstance.registeredResources); without it, a GPU machine that
                        # registered none and runs no GPU task (lambdas/scheduler/state.py registered_gpus).
                        "registeredResources": [{"name": "CPU", "type": "INTEGER", "integerValue": entry.schedulable_vcpus * 1024},
                                                {"name": "MEMORY", "type": "INTEGER",
                                                 "integerValue": entry.schedulable_memory_mib},
                                                {"name": "GPU", "type": "STRINGSET",
                                                 "stringSetValue": [f"GPU-{instance_id}-{g}" for g in range(entry.gpus)]}],
                        "runningTasksCount": used, "pendingTasksCount": 0,
                        "attributes": [{"name": f"ecs.capability.{c}"} for c in ("docker-remote-api.1.44", "gpu-driver",
                                                                                "task-eni", "execution-role-ecr-pull")]}
                self.groups[(region, name)] = {
                    "AutoScalingGroupName": name, "MinSize": 0, "MaxSize": count + 100, "DesiredCapacity": count,
                    "Instances": members, "Tags": []}
                self.fleets.append({"region": region, "fleet": fleet, "asg_name": name, "cluster": cluster,
                                    "task_family": f"mlfleet-{ENV}-gpu-job", "max_instances": count + 50,
                                    "instance_types": list(types), "on_demand_base": 0, "on_demand_percent_above_base": 0})
            base = f"arn:aws:ecs:{region}:{ACCOUNT}:task-definition/mlfleet-{ENV}-gpu-job:1"
            self.definitions[base] = self._definition(base, IMAGES[0])
        self.running = running

    def _definition(self, arn: str, image: str, secrets=None) -> dict:
        family, revision = arn.rsplit("/", 1)[1].split(":")
        container = {"name": "job", "image": image, "essential": True, "cpu": 1024, "memoryReservation": 4096,
                     "resourceRequirements": [{"type": "GPU", "value": "1"}],
                     "logConfiguration": {"logDriver": "awslogs", "options": {"awslogs-group": f"/mlfleet/{ENV}/jobs"}}}
        if secrets:
            container["secrets"] = secrets
        return {"taskDefinitionArn": arn, "family": family, "revision": int(revision), "status": "ACTIVE",
                "containerDefinitions": [container], "networkMode": "bridge",
                "executionRoleArn": f"arn:aws:iam::{ACCOUNT}:role/mlfleet/{ENV}/execution"}

    def _task(self, region, cluster, container_instance, job_id, attempt, gpus, image) -> dict:
        arn = f"arn:aws:ecs:{region}:{ACCOUNT}:task/{cluster}/{self.rng.getrandbits(128):032x}"
        return {"taskArn": arn, "clusterArn": f"arn:aws:ecs:{region}:{ACCOUNT}:cluster/{cluster}",
                "containerInstanceArn": container_instance, "startedBy": job_id, "lastStatus": "RUNNING",
                "desiredStatus": "RUNNING", "createdAt": NOW - timedelta(minutes=30), "group": "family:gpu-job",
                "taskDefinitionArn": f"arn:aws:ecs:{region}:{ACCOUNT}:task-definition/mlfleet-{ENV}-gpu-job:1",
                "overrides": {"containerOverrides": [{"name": "job", "resourceRequirements": [
                    {"type": "GPU", "value": str(gpus)}], "cpu": 3072 * gpus, "memoryReservation": 12_000 * gpus,
                    "environment": [{"name": "MLFLEET_JOB_ID", "value": job_id},
                                    {"name": "MLFLEET_ATTEMPT", "value": str(attempt)}]}]},
                "containers": [{"name": "job", "image": image, "lastStatus": "RUNNING"}]}

    # --- DynamoDB ---------------------------------------------------------------------------------

    def dynamodb_GetItem(self, region, p):
        item = self.items.get(p["Key"]["job_id"]["S"])
        return {"Item": item} if item else {}

    def dynamodb_Query(self, region, p):
        values = p["ExpressionAttributeValues"]
        if p.get("IndexName") == "by-submission":  # one submission's jobs, by job id
            ordered = sorted((i for i in self.items.values() if i["submission_id"]["S"] == values[":s"]["S"]),
                             key=lambda i: i["job_id"]["S"])
        elif p.get("IndexName") == "by-team-queued":  # one team's queued jobs (sparse), oldest submission first
            ordered = sorted((i for i in self.items.values() if i.get("queued_team", {}).get("S") == values[":team"]["S"]),
                             key=lambda i: (float(i["submitted_at"]["N"]), i["job_id"]["S"]))
        else:  # by-state: one state's jobs, oldest submission first (newest first: ScanIndexForward false)
            ordered = sorted((i for i in self.items.values() if i["state"]["S"] == values[":state"]["S"]),
                             key=lambda i: (float(i["submitted_at"]["N"]), i["job_id"]["S"]),
                             reverse=not p.get("ScanIndexForward", True))
        start = 0
        if "ExclusiveStartKey" in p:
            last = p["ExclusiveStartKey"]["job_id"]["S"]
            start = next(n for n, i in enumerate(ordered) if i["job_id"]["S"] == last) + 1
        page, size = [], 0
        for item in ordered[start:]:
            page.append(item)
            size += len(json.dumps(item))
            if size >= PAGE_BYTES or len(page) == p.get("Limit"):  # a page ends at 1 MB or at Limit items
                break
        answer = {"Items": page, "Count": len(page), "ScannedCount": len(page)}
        if start + len(page) < len(ordered):
            key = page[-1]
            answer["LastEvaluatedKey"] = {k: key[k] for k in ("job_id", "state", "submitted_at")}
        return answer

    def dynamodb_PutItem(self, region, p):
        item, current = p["Item"], self.items.get(p["Item"]["job_id"]["S"])
        condition = p.get("ConditionExpression", "")
        if condition.startswith("attribute_not_exists") and current is not None:
            raise Refusal("ConditionalCheckFailedException", "The conditional request failed")
        if condition.startswith("version") and (current is None or current["version"] != p["ExpressionAttributeValues"][":v"]):
            raise Refusal("ConditionalCheckFailedException", "The conditional request failed")
        self.items[item["job_id"]["S"]] = item
        return {}

    def dynamodb_UpdateItem(self, region, p):
        current = self.items.get(p["Key"]["job_id"]["S"])
        values = p["ExpressionAttributeValues"]
        if "reserved" not in p["UpdateExpression"] or current is None or current["state"] != values[":queued"] \
                or current["attempt"] != values[":attempt"]:
            raise Refusal("ConditionalCheckFailedException", "The conditional request failed")
        current["reserved"], current["updated_at"] = values[":reserved"], values[":now"]
        return {}

    # --- SQS, SSM, SNS ------------------------------------------------------------------------------

    def sqs_ReceiveMessage(self, region, p):
        batch, self.queue = self.queue[: p.get("MaxNumberOfMessages", 1)], self.queue[p.get("MaxNumberOfMessages", 1):]
        return {"Messages": batch} if batch else {}

    def sqs_DeleteMessageBatch(self, region, p):
        return {"Successful": [{"Id": e["Id"]} for e in p["Entries"]], "Failed": []}

    def sqs_SendMessage(self, region, p):
        return {"MessageId": "dead-letter", "MD5OfMessageBody": "0" * 32}

    def ssm_GetParameter(self, region, p):
        # The teams parameter as a stack without teams writes it (components/jobs teams_document); else admission.
        value = ({"teams": {}, "default_team": None, "share_half_life_minutes": 60} if p["Name"].endswith("/teams")
                 else {"state": "open", "reason": "bench", "changedAt": "2026-11-01"})
        return {"Parameter": {"Name": p["Name"], "Type": "String", "Version": 1, "Value": json.dumps(value)}}

    def sns_Publish(self, region, p):
        return {"MessageId": "alert"}

    def cloudwatch_PutMetricData(self, region, p):  # the fleets' boot metric (lambdas/scheduler/boot_health.py)
        return {}

    # --- ECS ----------------------------------------------------------------------------------------

    def _page(self, items, p, key):
        start = int(p.get("nextToken") or 0)
        size = p.get("maxResults") or 100
        answer = {key: items[start:start + size]}
        if start + size < len(items):
            answer["nextToken"] = str(start + size)
        return answer

    def ecs_ListContainerInstances(self, region, p):
        arns = [a for a, ci in self.container_instances.items() if ci["region"] == region]
        return self._page(arns, p, "containerInstanceArns")

    def ecs_DescribeContainerInstances(self, region, p):
        return {"containerInstances": [{k: v for k, v in self.container_instances[a].items() if k not in ("region", "cluster")}
                                       for a in p["containerInstances"]], "failures": []}

    def ecs_ListTasks(self, region, p):
        arns = [a for a, t in self.tasks.items() if t["taskArn"].split(":")[3] == region
                and (not p.get("startedBy") or t["startedBy"] == p["startedBy"])
                and t["desiredStatus"] == p.get("desiredStatus", "RUNNING")]
        return self._page(arns, p, "taskArns")

    def ecs_DescribeTasks(self, region, p):
        return {"tasks": [self.tasks[a] for a in p["tasks"] if a in self.tasks], "failures": []}

    def ecs_DescribeTaskDefinition(self, region, p):
        name = p["taskDefinition"]
        if name in self.definitions:
            return {"taskDefinition": self.definitions[name], "tags": []}
        family = [d for a, d in self.definitions.items() if a.split(":")[3] == region and d["family"] == name.split(":")[0]]
        return {"taskDefinition": max(family, key=lambda d: d["revision"]), "tags": []}

    def ecs_ListTaskDefinitions(self, region, p):
        arns = sorted((a for a, d in self.definitions.items() if a.split(":")[3] == region and d["family"] == p["familyPrefix"]),
                      key=lambda a: -self.definitions[a]["revision"])
        return {"taskDefinitionArns": arns[: p.get("maxResults", 100)]}

    def ecs_RegisterTaskDefinition(self, region, p):
        revisions = [d["revision"] for a, d in self.definitions.items() if a.split(":")[3] == region]
        arn = f"arn:aws:ecs:{region}:{ACCOUNT}:task-definition/{p['family']}:{max(revisions) + 1}"
        container = p["containerDefinitions"][0]
        self.definitions[arn] = self._definition(arn, container["image"], container.get("secrets"))
        return {"taskDefinition": self.definitions[arn], "tags": []}

    def ecs_StartTask(self, region, p):
        override = p["overrides"]["containerOverrides"][0]
        gpus = int(override["resourceRequirements"][0]["value"])
        attempt = int(next(e["value"] for e in override["environment"] if e["name"] == "MLFLEET_ATTEMPT"))
        task = self._task(region, p["cluster"], p["containerInstances"][0], p["startedBy"], attempt, gpus, "")
        task["taskDefinitionArn"] = p["taskDefinition"]
        self.tasks[task["taskArn"]] = task
        return {"tasks": [task], "failures": []}

    def ecs_StopTask(self, region, p):
        self.tasks[p["task"]]["desiredStatus"] = "STOPPED"
        return {"task": self.tasks[p["task"]]}

    # --- EC2 and Auto Scaling (answered parsed) -------------------------------------------------------

    def ec2_DescribeInstances(self, region, p):
        # By InstanceIds or by the instance-id filter (what the scheduler and the removal executor send: an id
        # EC2 does not know is left out, not an error of the whole call).
        ids = list(p.get("InstanceIds", []))
        ids += [v for f in p.get("Filters", []) if f["Name"] == "instance-id" for v in f["Values"]]
        found = [self.instances[i] for i in ids if i in self.instances]
        return {"Reservations": [{"ReservationId": f"r-{n}", "Instances": [i]} for n, i in enumerate(found)]}

    def ec2_CreateTags(self, region, p):
        for instance_id in p["Resources"]:
            tags = self.instances[instance_id]["Tags"]
            for tag in p["Tags"]:
                tags[:] = [t for t in tags if t["Key"] != tag["Key"]] + [dict(tag)]
        return {}

    def ec2_DeleteTags(self, region, p):
        keys = {t["Key"] for t in p["Tags"]}
        for instance_id in p["Resources"]:
            self.instances[instance_id]["Tags"] = [t for t in self.instances[instance_id]["Tags"] if t["Key"] not in keys]
        return {}

    def ec2_DescribeSpotPriceHistory(self, region, p):
        return {"SpotPriceHistory": [
            {"InstanceType": t, "AvailabilityZone": f"{region}{z}", "ProductDescription": "Linux/UNIX", "Timestamp": NOW,
             "SpotPrice": f"{0.4 * self.catalog.get(t).on_demand_price(region):.4f}"}
            for t in p.get("InstanceTypes", []) for z in "abc"]}

    def autoscaling_DescribeAutoScalingGroups(self, region, p):
        return {"AutoScalingGroups": [self.groups[(region, n)] for n in p["AutoScalingGroupNames"] if (region, n) in self.groups]}

    def autoscaling_DescribeScalingActivities(self, region, p):
        return {"Activities": []}

    def autoscaling_SetDesiredCapacity(self, region, p):
        self.groups[(region, p["AutoScalingGroupName"])]["DesiredCapacity"] = p["DesiredCapacity"]
        return {}


# --- the botocore boundary -----------------------------------------------------------------------

class Boundary:
    """Answers every call of the functions' clients from `account`, counting calls and simulated latency."""

    def __init__(self, account: Account, latency_ms: dict[str, float]):
        self.account, self.latency_ms = account, latency_ms
        self.calls: Counter = Counter()
        self.own_cpu_s = 0.0  # the stand-in account's own work, not the scheduler's: subtracted

    def install(self) -> None:
        from lambdas.common.aws import reset_clients, session

        reset_clients()
        events = session().events
        events.register_first("before-parameter-build", self._keep_params)
        events.register_first("before-call", self._before_call)
        events.register_first("before-send", self._before_send)

    @staticmethod
    def _keep_params(params, context, **kwargs):
        context["bench.params"] = params

    def _answer(self, service: str, operation: str, region: str, params: dict, encode: bool = False):
        self.calls[f"{service}:{operation}"] += 1
        handler = getattr(self.account, f"{service}_{operation}", None)
        if handler is None:
            raise NotImplementedError(f"{service}:{operation} is not part of the benchmark's account")
        start = time.process_time()
        try:
            answer = handler(region, params)
            return json.dumps(answer, default=_json_default).encode() if encode else answer
        finally:
            self.own_cpu_s += time.process_time() - start

    def _before_call(self, model, context, **kwargs):
        if model.service_model.protocol == "json":
            return None  # answered as a JSON body in before-send, and parsed by botocore
        service, region = model.service_model.service_name, context["client_region"]
        try:
            parsed = self._answer(service, model.name, region, context["bench.params"])
        except Refusal as refusal:
            return AWSResponse("https://bench/", 400, {}, None), {
                "Error": {"Code": refusal.code, "Message": refusal.message}, "ResponseMetadata": {"HTTPStatusCode": 400}}
        return AWSResponse("https://bench/", 200, {}, None), {**parsed, "ResponseMetadata": {"HTTPStatusCode": 200}}

    def _before_send(self, request, event_name, **kwargs):
        service_id, operation = event_name.split(".")[1:3]
        service = {"dynamodb": "dynamodb", "ecs": "ecs", "sqs": "sqs", "ssm": "ssm"}[service_id]
        region = urlparse(request.url).hostname.split(".")[1]
        params = json.loads(request.body or b"{}")
        try:
            body, status = self._answer(service, operation, region, params, encode=True), 200
        except Refusal as refusal:
            body, status = json.dumps({"__type": refusal.code, "message": refusal.message}).encode(), 400
        return AWSResponse(request.url, status, {"x-amzn-requestid": "bench"}, Raw(body))

    def latency_s(self) -> float:
        return sum(n * self.latency_ms.get(op.split(":")[0], 0) for op, n in self.calls.items()) / 1000


# --- one measured run ----------------------------------------------------------------------------

def one_run(jobs: int, instances: int, seed: int, latency_ms: dict[str, float], trace_memory: bool,
            free_share: float, submission_jobs: int = 500) -> dict:
    from lambdas.scheduler import handler

    account = Account(jobs, instances, seed, free_share, submission_jobs)
    boundary = Boundary(account, latency_ms)
    boundary.install()
    settings = handler.Settings(
        environment=ENV, jobs_table=f"mlfleet-{ENV}-jobs", jobs_queue_url="https://sqs.us-east-1.amazonaws.com/1/q",
        jobs_dlq_url="https://sqs.us-east-1.amazonaws.com/1/dlq", admission_parameter=f"/mlfleet/{ENV}/admission",
        fleets=json.dumps(account.fleets), max_hourly_usd=100_000.0,
        alert_topic_arn=f"arn:aws:sns:us-east-1:{ACCOUNT}:mlfleet-{ENV}-alerts", default_max_attempts=3,
        rebalance_timeout_minutes=30, account_id=ACCOUNT)
    cpu0 = time.process_time()

    def lambda_elapsed_s() -> float:
        return (time.process_time() - cpu0 - boundary.own_cpu_s) / LAMBDA_VCPU_SHARE + boundary.latency_s()

    planning = {"s": 0.0}
    real_plan = handler.plan

    def timed_plan(*args, **kwargs):
        start = time.process_time()
        try:
            return real_plan(*args, **kwargs)
        finally:
            planning["s"] += time.process_time() - start

    handler.plan = timed_plan
    if trace_memory:
        tracemalloc.start()
    wall0 = time.perf_counter()
    try:
        summary = handler.run(settings, lambda: int((LAMBDA_TIMEOUT_S - lambda_elapsed_s()) * 1000), now=NOW)
    finally:
        handler.plan = real_plan
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0 - boundary.own_cpu_s
    peak = tracemalloc.get_traced_memory()[1] if trace_memory else None
    if trace_memory:
        tracemalloc.stop()
    return {"summary": summary, "wall_s": wall, "cpu_s": cpu, "account_cpu_s": boundary.own_cpu_s, "plan_cpu_s": planning["s"], "peak_python_bytes": peak,
            "calls": dict(boundary.calls), "latency_s": boundary.latency_s(), "running_before": account.running}


def main(argv=None) -> int:
    from lambdas.jobs.spec import MAX_JOBS_PER_SUBMISSION

    parser = argparse.ArgumentParser(prog="python -m benchmarks.scheduler_scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--instances", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--free-share", type=float, default=0.1,
                        help="share of the machines with free GPUs (default 0.1); 1.0 is a fleet that just scaled out")
    parser.add_argument("--submission-jobs", type=int, default=500,
                        help=f"jobs per submission (default 500; at most {MAX_JOBS_PER_SUBMISSION:,}, as a spec allows)")
    parser.add_argument("--latency-ms", action="append", default=[], metavar="SERVICE=MS",
                        help=f"assumed latency of one call (default {DEFAULT_LATENCY_MS})")
    parser.add_argument("--no-memory", action="store_true", help="skip the second, tracemalloc-traced run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not 1 <= args.submission_jobs <= MAX_JOBS_PER_SUBMISSION:
        parser.error(f"--submission-jobs {args.submission_jobs}: from 1 to {MAX_JOBS_PER_SUBMISSION:,} "
                     "(lambdas/jobs/spec.py, MAX_JOBS_PER_SUBMISSION)")
    latency = dict(DEFAULT_LATENCY_MS)
    for item in args.latency_ms:
        service, _, ms = item.partition("=")
        latency[service] = float(ms)

    import logging
    import os

    # Fake credentials and the home region, as the Lambda's environment has: every call is answered here,
    # and none may reach an account.
    os.environ.update({"AWS_ACCESS_KEY_ID": "benchmark", "AWS_SECRET_ACCESS_KEY": "benchmark",
                       "AWS_DEFAULT_REGION": REGIONS[0]})
    os.environ.pop("AWS_SESSION_TOKEN", None)
    os.environ.pop("AWS_PROFILE", None)
    import lambdas.scheduler.handler  # noqa: F401  (the imports a cold start pays, before the baseline)

    decisions = logging.getLogger("mlfleet")
    level = decisions.level
    decisions.setLevel(logging.WARNING)  # one line per decision: tens of thousands here
    try:
        baseline_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        timed = one_run(args.jobs, args.instances, args.seed, latency, False, args.free_share, args.submission_jobs)
        traced = None if args.no_memory else one_run(args.jobs, args.instances, args.seed, latency, True,
                                                     args.free_share, args.submission_jobs)
    finally:
        decisions.setLevel(level)  # run in-process by the tests: the next test's decisions are logged again
    summary = timed["summary"]
    lambda_cpu = timed["cpu_s"] / LAMBDA_VCPU_SHARE
    figures = {
        "jobs_queued": args.jobs, "submission_jobs": args.submission_jobs, "instances": args.instances,
        "free_share": args.free_share,
        "running_tasks": timed["running_before"],
        "pending_read": summary["pending"], "started": len(summary["started"]), "waiting": summary["waiting"],
        "placements_left_for_next_run": summary.get("left_for_next_run", 0),
        "scaled": summary["scaled"], "errors": len(summary["errors"]),
        "wall_s": round(timed["wall_s"], 2), "cpu_s": round(timed["cpu_s"], 2), "plan_cpu_s": round(timed["plan_cpu_s"], 2),
        "stand_in_account_cpu_s": round(timed["account_cpu_s"], 2),
        "lambda_cpu_s": round(lambda_cpu, 1), "aws_calls": sum(timed["calls"].values()),
        "assumed_latency_ms": latency, "lambda_s": round(lambda_cpu + timed["latency_s"], 1),
        "lambda_timeout_s": LAMBDA_TIMEOUT_S,
        "peak_python_mib": round(traced["peak_python_bytes"] / 2**20, 1) if traced else None,
        "rss_after_imports_mib": round(baseline_rss, 1),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "lambda_memory_mib": LAMBDA_MEMORY_MIB, "calls_by_operation": dict(sorted(timed["calls"].items())),
    }
    # The Lambda holds the imports and what the run allocates, not the stand-in account (which max_rss_mib
    # includes): its memory is estimated as the process after imports plus the run's traced peak.
    figures["lambda_memory_estimate_mib"] = (round(baseline_rss + figures["peak_python_mib"], 1)
                                             if traced else None)
    figures["fits"] = figures["lambda_s"] <= LAMBDA_TIMEOUT_S and (
        figures["lambda_memory_estimate_mib"] is None or figures["lambda_memory_estimate_mib"] <= LAMBDA_MEMORY_MIB)
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        for key, value in figures.items():
            print(f"{key:>22}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
