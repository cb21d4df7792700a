"""Webhooks: signed, ordered, replayable deliveries of events to tenants' HTTPS endpoints."""
