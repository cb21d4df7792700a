"""Writes of the outbox app, by action family: `relay` (claim, produce, settle), `prune`
(retention) and `release` (an operator makes a waiting record due now). The write path
inside the event's transaction is the projection tier's `outbox.record`."""
