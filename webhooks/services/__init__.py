"""Writes of the webhooks app: endpoints (`endpoints`), the relay (`relay`), replay and
retry (`replay`)."""
