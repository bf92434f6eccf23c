"""python -m benchmarks.fair_share: shares of GPU-hours between two teams against their weights."""
