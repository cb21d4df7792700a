"""Writes of the work queue, one module per action family (see each module's docstring).

Modules are imported directly (`from queues.services import scheduler`); this package
imports none of them. What the runs services call inside their transactions is not here
but in the projection tier, `queues.projection`; `session_turns` is the queue behind
sessions' `when_busy=enqueue` (`sessions.turn_queue`).
"""
