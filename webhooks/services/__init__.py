"""Writes of the webhooks app: `endpoints` (register, change, rotate the secret of, delete;
replay and retry-now of deliveries), `secrets` (new signing secrets, which sign now) and
`relay` (claim, send, settle). Recording deliveries in the event's transaction is the
projection tier's `webhooks.record`."""
