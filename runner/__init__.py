"""The reference runner: executes one run's commands on an agent backend.

It is a client of the agentrun API and nothing else (no database, no Django, no server
package), so it can run as a local subprocess, a Kubernetes Job or on a laptop. It is
started as `python -m runner run --run RUN_ID` (installed: `agentrun run ...`), which is
`runner.cli`; `runner.loop.Runner` is the program, and `runner.terminal` the terminal
client (`agentrun turn|steer|cancel|tail`). `manage.py runner` is a shim for old scripts.
It stands apart from the server's layers: nothing under it imports Django or a server
package (`tests/runner/test_runner_is_django_free.py`); of the server, only that shim
imports it.
"""
