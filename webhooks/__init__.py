"""webhooks: signed, ordered, replayable deliveries of events to tenants' HTTPS endpoints.

Above `outbox` (it sends the outbox's CloudEvents envelope, `outbox.cloudevents`) and
`runs`, below `ops`, which reads its status (SPEC §9.1; its row in `tests/layering.py`
`LAYERS`). `webhooks.record` is its projection module: the runs event append records the
deliveries in the event's own transaction. `webhooks.services` registers endpoints
and replays and retries deliveries (`endpoints`, `secrets`), relays them (`relay`);
`webhooks.targets` is the URL and address policy (SSRF), `webhooks.sender` one signed
request; `webhooks.locks` the relay's claim and `webhooks.sql` the statements that take no
lock; `webhooks.selectors` its reads.
"""
