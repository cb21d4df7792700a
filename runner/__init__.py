"""The reference runner: executes one run's commands on an agent backend.

It is a client of the agentrun API and nothing else (no database, no Django models), so
it can run as a local subprocess, a Kubernetes Job or on a laptop. `manage.py runner`
is a thin entry point; `runner.loop.Runner` is the program.
"""
