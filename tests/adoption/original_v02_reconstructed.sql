-- NOT verbatim. The seed file holds neither the original's migration 012
-- (durableDispatchAndKafkaOutboxMigrationSql), 013 (runnerDispatchOutcomeMigrationSql) nor
-- 015 (kafkaOutboxPendingKeyOrderMigrationSql): this is their likely DDL, reconstructed from
-- the columns the seed's queries write and read (the INSERT column lists of
-- agentrun_runner_dispatch_intents and agentrun_kafka_event_outbox, claimRunnerDispatchIntents,
-- completeRunnerDispatchIntent, claimKafkaEventOutbox), the names the seed's migration
-- contract prints (agentrun_kafka_event_outbox_seq,
-- agentrun_kafka_event_outbox_pending_key_order_idx) and the seed's usual types. It checks that
-- adoption also recognises these two tables when an original database has them.

-- migration 012_v02_durable_dispatch_kafka_outbox (reconstructed)
CREATE TABLE IF NOT EXISTS agentrun_runner_dispatch_intents (
  id text PRIMARY KEY,
  run_id text NOT NULL REFERENCES agentrun_runs(id) ON DELETE CASCADE,
  command_id text NOT NULL UNIQUE REFERENCES agentrun_commands(id) ON DELETE CASCADE,
  kind text NOT NULL,
  input jsonb NOT NULL,
  input_hash text NOT NULL,
  state text NOT NULL,
  attempt_count integer NOT NULL DEFAULT 0,
  runner_job_id text NOT NULL,
  lease_owner text,
  lease_expires_at timestamptz,
  next_attempt_at timestamptz NOT NULL,
  last_error jsonb,
  dispatched_at timestamptz,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS agentrun_runner_dispatch_intents_due_idx
  ON agentrun_runner_dispatch_intents (state, next_attempt_at, created_at);

CREATE SEQUENCE IF NOT EXISTS agentrun_kafka_event_outbox_seq;
CREATE TABLE IF NOT EXISTS agentrun_kafka_event_outbox (
  id text PRIMARY KEY,
  outbox_seq bigint NOT NULL UNIQUE,
  event_id text NOT NULL,
  run_id text NOT NULL REFERENCES agentrun_runs(id) ON DELETE CASCADE,
  source_seq integer NOT NULL,
  topic text NOT NULL,
  partition_key text NOT NULL,
  value jsonb NOT NULL,
  headers jsonb NOT NULL DEFAULT '{}'::jsonb,
  attempt_count integer NOT NULL DEFAULT 0,
  lease_owner text,
  lease_expires_at timestamptz,
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  last_error jsonb,
  delivered_at timestamptz,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  UNIQUE (topic, event_id)
);
INSERT INTO agentrun_schema_migrations (id, checksum) VALUES ('012_v02_durable_dispatch_kafka_outbox', 'reconstructed');

-- migration 013_v02_runner_dispatch_outcome (reconstructed)
ALTER TABLE agentrun_runner_dispatch_intents ADD COLUMN IF NOT EXISTS dispatch_outcome text;
ALTER TABLE agentrun_runner_dispatch_intents ADD COLUMN IF NOT EXISTS actual_runner_job_id text;
ALTER TABLE agentrun_runner_dispatch_intents ADD COLUMN IF NOT EXISTS active_runner_id text;
INSERT INTO agentrun_schema_migrations (id, checksum) VALUES ('013_v02_runner_dispatch_outcome', 'reconstructed');

-- migration 015_v02_kafka_outbox_pending_key_order (reconstructed)
CREATE INDEX IF NOT EXISTS agentrun_kafka_event_outbox_pending_key_order_idx
  ON agentrun_kafka_event_outbox (topic, partition_key, outbox_seq)
  WHERE delivered_at IS NULL;
INSERT INTO agentrun_schema_migrations (id, checksum) VALUES ('015_v02_kafka_outbox_pending_key_order', 'reconstructed');
