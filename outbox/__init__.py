"""outbox: the transactional Kafka event outbox and its relay.

Above `runs`, beside `dispatch`, below `sessions` and `webhooks` (which sends its
CloudEvents envelopes) (SPEC §9.1). `outbox.record` is its
projection module (the run's events recorded in the run's transaction) and
`outbox.cloudevents` builds the envelopes; `outbox.services` relays, releases and prunes;
`outbox.locks` holds what takes locks (the key lock, the claim, the completion),
`outbox.sql` the statements that take none; `outbox.kafka` the producer;
`outbox.listener` the relay's wake-up on a worker's LISTEN.
"""
