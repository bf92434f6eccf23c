"""The cover benchmark runs on a pod list, with whole GPUs and with fractional pods sharing them."""

from __future__ import annotations

import json

from benchmarks import cover


def test_fractional_pods_are_bought_for_in_bundles_and_cost_less(tmp_path, capsys):
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"]
    rows += [f"part-{i},2000,8000,1,{300 + 100 * (i % 3)}," for i in range(12)]  # 0.3-0.5 of a GPU each
    rows += [f"whole-{i},4000,16000,1,1000," for i in range(3)]
    path = tmp_path / "pods.csv"
    path.write_text("\n".join(rows) + "\n")
    results = {}
    for share in (False, True):
        assert cover.main(["--trace", str(path), "--budget", "1", "--json"]
                          + (["--share-fractional-gpus"] if share else [])) == 0
        results[share] = json.loads(capsys.readouterr().out)
    whole, shared = results[False], results[True]
    # Whole GPUs: 15 one-GPU jobs. Shared: the 12 fractional pods become one-GPU bundles, two or three
    # to a GPU, next to the 3 whole-GPU pods, and the purchase costs less.
    assert whole["jobs"] == 15 and 3 + 12 // 3 <= shared["jobs"] <= 3 + 12 // 2
    assert shared["planner_purchase_usd_per_hour"] < whole["planner_purchase_usd_per_hour"]
    for result in (whole, shared):
        assert 0 < result["planner_purchase_usd_per_hour"] <= result["greedy_usd_per_hour"] + 1e-9
        assert result["cover_from_greedy"]["converged"]


def test_past_the_kinds_one_cover_takes_the_planner_buys_in_parts_and_the_whole_covers_are_skipped(
        tmp_path, capsys, monkeypatch):
    from lambdas.scheduler.planning import purchase

    monkeypatch.setattr(purchase, "COVER_MAX_KINDS", 5)
    monkeypatch.setattr(purchase, "PART_KINDS", 3)
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"]
    rows += [f"pod-{i},{1000 * (1 + i % 7)},{4096 * (1 + i % 5)},{1 + i % 2},1000," for i in range(24)]
    path = tmp_path / "pods.csv"
    path.write_text("\n".join(rows) + "\n")
    assert cover.main(["--trace", str(path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["kinds"] > 5
    assert all("past the 5 one cover takes" in result[name]["skipped"]
               for name in ("cover_from_one_box_per_kind", "cover_from_greedy"))
    assert 0 < result["planner_purchase_usd_per_hour"] <= result["greedy_usd_per_hour"] + 1e-9
