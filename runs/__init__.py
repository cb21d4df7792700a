"""runs: runs, their commands, events, leases and cancels: the bottom domain layer.

Layers (SPEC §9.1): agentrun < runs < dispatch, outbox < sessions < queues < ops; the
runner stands apart. `runs.models`, `runs.locks` (the run row lock every write takes
first) and `runs.versions` are its foundation; `runs.services` the write paths
(lifecycle, commands, the event log and its fence, cancellation, terminal, the reaper);
`runs.selectors` the reads; `runs.waiting` the long-poll. Its services write other apps'
rows only through their projection modules (`sessions.projection`, `queues.projection`,
`dispatch.intents`, `outbox.record`), in the run's transaction
(`tests/test_projection_layers.py`).
"""
