"""Benchmarks for agentrun (issue 9): `python -m bench all|<cell> [--quick]`; see README.md."""
