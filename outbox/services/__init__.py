"""Writes of the outbox app, by action family: `record` (the write path inside the event's
transaction), `relay` (claim, produce, settle), `prune` (retention) and `release` (an
operator makes a waiting record due now)."""
