"""python -m benchmarks.scheduler: the scheduler benchmark of DESIGN.md."""
