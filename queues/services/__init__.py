"""Writes of the work queue, one module per action family (see each module's docstring).

Modules are imported directly (`from queues.services import scheduler`); this package
imports none of them, because the runs services import `queues.services.projection`
while the scheduler imports the runs services.
"""
