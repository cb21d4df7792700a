"""`python -m runner`: the same program as the `agentrun` console script."""

from runner.cli import main

raise SystemExit(main())
