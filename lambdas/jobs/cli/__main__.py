"""`python -m lambdas.jobs.cli`: the mlfleet command."""

from lambdas.jobs.cli.main import main

raise SystemExit(main())
