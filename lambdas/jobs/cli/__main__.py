"""`python -m lambdas.jobs.cli`: the mlfleet command."""

from .main import main

raise SystemExit(main())
