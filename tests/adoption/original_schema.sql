-- The original (TypeScript) agentrun manager's PostgreSQL schema: its migrations 001-011
-- and 014, verbatim from the seed (/work/shared/seed/000_dac4ce4740524c86.txt), in the order
-- it applies them (012, 013 and 015 are not in the seed). `${backendCapabilitiesSqlValues(...)}`
-- (a TypeScript helper not in the seed) is written out as literal rows of the same shape,
-- and each backend upsert is put on one line.
-- Used by tests/adoption/original.py to build a database the way the original leaves it.

CREATE TABLE IF NOT EXISTS agentrun_schema_migrations (
  id text PRIMARY KEY,
  checksum text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);

-- migration 001_v01_initial_durable_store
CREATE TABLE IF NOT EXISTS agentrun_runs (
  id text PRIMARY KEY,
  tenant_id text NOT NULL,
  project_id text NOT NULL,
  workspace_ref jsonb NOT NULL,
  provider_id text NOT NULL,
  backend_profile text NOT NULL,
  execution_policy jsonb NOT NULL,
  trace_sink jsonb,
  status text NOT NULL,
  terminal_status text,
  failure_kind text,
  failure_message text,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  claimed_by text,
  lease_expires_at timestamptz
);

CREATE TABLE IF NOT EXISTS agentrun_commands (
  id text PRIMARY KEY,
  run_id text NOT NULL REFERENCES agentrun_runs(id) ON DELETE CASCADE,
  seq integer NOT NULL,
  type text NOT NULL,
  payload jsonb NOT NULL,
  payload_hash text NOT NULL,
  idempotency_key text,
  state text NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  acknowledged_at timestamptz,
  UNIQUE (run_id, seq)
);

CREATE UNIQUE INDEX IF NOT EXISTS agentrun_commands_run_idempotency_key_idx
  ON agentrun_commands (run_id, idempotency_key)
  WHERE idempotency_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS agentrun_events (
  id text PRIMARY KEY,
  run_id text NOT NULL REFERENCES agentrun_runs(id) ON DELETE CASCADE,
  seq integer NOT NULL,
  type text NOT NULL,
  payload jsonb NOT NULL,
  created_at timestamptz NOT NULL,
  UNIQUE (run_id, seq)
);

CREATE TABLE IF NOT EXISTS agentrun_runners (
  id text PRIMARY KEY,
  run_id text,
  attempt_id text,
  backend_profile text,
  placement text,
  source_commit text,
  metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
  registered_at timestamptz NOT NULL,
  heartbeat_at timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS agentrun_backends (
  profile text PRIMARY KEY,
  capabilities jsonb NOT NULL,
  capacity jsonb NOT NULL,
  health jsonb NOT NULL,
  updated_at timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS agentrun_leases (
  run_id text PRIMARY KEY REFERENCES agentrun_runs(id) ON DELETE CASCADE,
  runner_id text NOT NULL,
  lease_expires_at timestamptz NOT NULL,
  stale_recovery_marker jsonb,
  updated_at timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS agentrun_runs_status_idx ON agentrun_runs (status, updated_at);
CREATE INDEX IF NOT EXISTS agentrun_events_run_seq_idx ON agentrun_events (run_id, seq);
CREATE INDEX IF NOT EXISTS agentrun_commands_run_seq_idx ON agentrun_commands (run_id, seq);
CREATE INDEX IF NOT EXISTS agentrun_leases_expiry_idx ON agentrun_leases (lease_expires_at);

INSERT INTO agentrun_backends (profile, capabilities, capacity, health, updated_at) VALUES ( 'codex', '{"protocol":"codex-app-server-jsonrpc-stdio","transport":"stdio","command":"codex app-server --listen stdio://"}'::jsonb, '{"mode":"manual-runner-v0.1"}'::jsonb, '{"status":"registered"}'::jsonb, now() ) ON CONFLICT (profile) DO UPDATE SET capabilities = EXCLUDED.capabilities, capacity = EXCLUDED.capacity, health = EXCLUDED.health, updated_at = EXCLUDED.updated_at;
INSERT INTO agentrun_schema_migrations (id, checksum) VALUES ('001_v01_initial_durable_store', 'seed-checksum');

-- migration 002_v01_backend_profiles
INSERT INTO agentrun_backends (profile, capabilities, capacity, health, updated_at) VALUES ( 'codex', '{"protocol":"codex-app-server-jsonrpc-stdio","transport":"stdio","command":"codex app-server --listen stdio://","models":["codex"],"requiredSecretKeys":["auth.json"]}'::jsonb, '{"mode":"manual-runner-v0.1","maxConcurrentRuns":4}'::jsonb, '{"status":"registered"}'::jsonb, now() ), ( 'deepseek', '{"protocol":"codex-app-server-jsonrpc-stdio","transport":"stdio","command":"codex app-server --listen stdio://","models":["deepseek"],"requiredSecretKeys":["config.toml"]}'::jsonb, '{"mode":"manual-runner-v0.1","maxConcurrentRuns":4}'::jsonb, '{"status":"registered"}'::jsonb, now() ) ON CONFLICT (profile) DO UPDATE SET capabilities = EXCLUDED.capabilities, capacity = EXCLUDED.capacity, health = EXCLUDED.health, updated_at = EXCLUDED.updated_at;
INSERT INTO agentrun_schema_migrations (id, checksum) VALUES ('002_v01_backend_profiles', 'seed-checksum');

-- migration 003_v01_hwlab_manual_dispatch
ALTER TABLE agentrun_runs ADD COLUMN IF NOT EXISTS session_ref jsonb;
ALTER TABLE agentrun_runs ADD COLUMN IF NOT EXISTS resource_bundle_ref jsonb;

CREATE TABLE IF NOT EXISTS agentrun_sessions (
  session_id text PRIMARY KEY,
  tenant_id text NOT NULL,
  project_id text NOT NULL,
  backend_profile text NOT NULL,
  conversation_id text,
  thread_id text,
  metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  expires_at timestamptz
);

CREATE TABLE IF NOT EXISTS agentrun_runner_jobs (
  id text PRIMARY KEY,
  run_id text NOT NULL REFERENCES agentrun_runs(id) ON DELETE CASCADE,
  command_id text NOT NULL REFERENCES agentrun_commands(id) ON DELETE CASCADE,
  idempotency_key text,
  payload_hash text NOT NULL,
  attempt_id text NOT NULL,
  runner_id text NOT NULL,
  namespace text NOT NULL,
  job_name text NOT NULL,
  manager_url text NOT NULL,
  image text NOT NULL,
  source_commit text NOT NULL,
  service_account_name text,
  result jsonb NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
);

CREATE UNIQUE INDEX IF NOT EXISTS agentrun_runner_jobs_run_idempotency_key_idx
  ON agentrun_runner_jobs (run_id, idempotency_key)
  WHERE idempotency_key IS NOT NULL;

CREATE INDEX IF NOT EXISTS agentrun_runner_jobs_run_command_idx ON agentrun_runner_jobs (run_id, command_id, created_at);
CREATE INDEX IF NOT EXISTS agentrun_sessions_tenant_project_idx ON agentrun_sessions (tenant_id, project_id, backend_profile, updated_at);
INSERT INTO agentrun_schema_migrations (id, checksum) VALUES ('003_v01_hwlab_manual_dispatch', 'seed-checksum');

-- migration 004_v01_queue_q1
CREATE TABLE IF NOT EXISTS agentrun_queue_tasks (
  id text PRIMARY KEY,
  tenant_id text NOT NULL,
  project_id text NOT NULL,
  queue text NOT NULL,
  lane text NOT NULL,
  title text NOT NULL,
  priority integer NOT NULL,
  state text NOT NULL,
  version bigint NOT NULL,
  backend_profile text NOT NULL,
  provider_id text,
  workspace_ref jsonb,
  execution_policy jsonb,
  resource_bundle_ref jsonb,
  payload jsonb NOT NULL,
  payload_hash text NOT NULL,
  references_json jsonb NOT NULL DEFAULT '[]'::jsonb,
  metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
  idempotency_key text,
  latest_attempt jsonb,
  session_path text,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  cancelled_at timestamptz,
  cancel_reason text
);

CREATE UNIQUE INDEX IF NOT EXISTS agentrun_queue_tasks_idempotency_idx
  ON agentrun_queue_tasks (tenant_id, project_id, idempotency_key)
  WHERE idempotency_key IS NOT NULL;

CREATE INDEX IF NOT EXISTS agentrun_queue_tasks_list_idx ON agentrun_queue_tasks (queue, state, version, priority, created_at);
CREATE INDEX IF NOT EXISTS agentrun_queue_tasks_updated_idx ON agentrun_queue_tasks (version, updated_at);

CREATE TABLE IF NOT EXISTS agentrun_queue_read_cursors (
  task_id text NOT NULL REFERENCES agentrun_queue_tasks(id) ON DELETE CASCADE,
  reader_id text NOT NULL,
  task_version bigint NOT NULL,
  read_at timestamptz NOT NULL,
  PRIMARY KEY (task_id, reader_id)
);

CREATE SEQUENCE IF NOT EXISTS agentrun_queue_version_seq;
INSERT INTO agentrun_schema_migrations (id, checksum) VALUES ('004_v01_queue_q1', 'seed-checksum');

-- migration 005_v01_minimax_m3_backend_profile
INSERT INTO agentrun_backends (profile, capabilities, capacity, health, updated_at) VALUES ( 'minimax-m3', '{"protocol":"codex-app-server-jsonrpc-stdio","transport":"stdio","command":"codex app-server --listen stdio://","models":["minimax-m3"],"requiredSecretKeys":["config.toml"]}'::jsonb, '{"mode":"manual-runner-v0.1","maxConcurrentRuns":4}'::jsonb, '{"status":"registered"}'::jsonb, now() ) ON CONFLICT (profile) DO UPDATE SET capabilities = EXCLUDED.capabilities, capacity = EXCLUDED.capacity, health = EXCLUDED.health, updated_at = EXCLUDED.updated_at;
INSERT INTO agentrun_schema_migrations (id, checksum) VALUES ('005_v01_minimax_m3_backend_profile', 'seed-checksum');

-- migration 006_v01_session_control
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS version bigint NOT NULL DEFAULT 1;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS execution_state text NOT NULL DEFAULT 'idle';
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS last_run_id text;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS last_command_id text;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS active_run_id text;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS active_command_id text;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS last_event_seq integer NOT NULL DEFAULT 0;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS terminal_status text;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS failure_kind text;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS title text;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS summary jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS last_activity_at timestamptz;

CREATE SEQUENCE IF NOT EXISTS agentrun_session_version_seq;

SELECT setval(
  'agentrun_session_version_seq',
  GREATEST(
    COALESCE((SELECT MAX(version) FROM agentrun_sessions), 0),
    1
  ),
  true
);

CREATE TABLE IF NOT EXISTS agentrun_session_read_cursors (
  session_id text NOT NULL REFERENCES agentrun_sessions(session_id) ON DELETE CASCADE,
  reader_id text NOT NULL,
  session_version bigint NOT NULL,
  read_at timestamptz NOT NULL,
  PRIMARY KEY (session_id, reader_id)
);

CREATE INDEX IF NOT EXISTS agentrun_sessions_control_idx ON agentrun_sessions (execution_state, backend_profile, updated_at DESC);
CREATE INDEX IF NOT EXISTS agentrun_sessions_version_idx ON agentrun_sessions (version, updated_at DESC);
CREATE INDEX IF NOT EXISTS agentrun_runs_session_idx ON agentrun_runs ((session_ref->>'sessionId'), updated_at DESC);
INSERT INTO agentrun_schema_migrations (id, checksum) VALUES ('006_v01_session_control', 'seed-checksum');

-- migration 007_v01_session_state_storage
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS storage_kind text NOT NULL DEFAULT 'none';
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS storage_pvc_name text;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS storage_namespace text;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS storage_size_bytes bigint;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS storage_files_count integer;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS storage_sha256 text;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS storage_updated_at timestamptz;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS codex_rollout_subdir text NOT NULL DEFAULT 'sessions';
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS storage_pvc_phase text;
ALTER TABLE agentrun_sessions ADD COLUMN IF NOT EXISTS storage_evicted_at timestamptz;

CREATE INDEX IF NOT EXISTS agentrun_sessions_storage_pvc_idx
  ON agentrun_sessions (storage_pvc_name)
  WHERE storage_pvc_name IS NOT NULL;

CREATE INDEX IF NOT EXISTS agentrun_sessions_storage_kind_idx
  ON agentrun_sessions (storage_kind, expires_at);
INSERT INTO agentrun_schema_migrations (id, checksum) VALUES ('007_v01_session_state_storage', 'seed-checksum');

-- migration 008_v01_dsflash_go_backend_profile
UPDATE agentrun_runs SET backend_profile = 'dsflash-go' WHERE backend_profile = 'ofcx-go';
UPDATE agentrun_sessions SET backend_profile = 'dsflash-go' WHERE backend_profile = 'ofcx-go';
UPDATE agentrun_runners SET backend_profile = 'dsflash-go' WHERE backend_profile = 'ofcx-go';
UPDATE agentrun_queue_tasks SET backend_profile = 'dsflash-go' WHERE backend_profile = 'ofcx-go';
UPDATE agentrun_runs
SET execution_policy = replace(replace(replace(execution_policy::text,
  '"profile": "ofcx-go"',
  '"profile": "dsflash-go"'),
  'agentrun-v01-provider-ofcx-go',
  'agentrun-v01-provider-dsflash-go'),
  '/home/agentrun/.codex-ofcx-go',
  '/home/agentrun/.codex-dsflash-go')::jsonb
WHERE execution_policy::text LIKE '%ofcx-go%';
UPDATE agentrun_queue_tasks
SET execution_policy = replace(replace(replace(execution_policy::text,
  '"profile": "ofcx-go"',
  '"profile": "dsflash-go"'),
  'agentrun-v01-provider-ofcx-go',
  'agentrun-v01-provider-dsflash-go'),
  '/home/agentrun/.codex-ofcx-go',
  '/home/agentrun/.codex-dsflash-go')::jsonb
WHERE execution_policy IS NOT NULL AND execution_policy::text LIKE '%ofcx-go%';
DELETE FROM agentrun_backends WHERE profile = 'ofcx-go';
INSERT INTO agentrun_backends (profile, capabilities, capacity, health, updated_at) VALUES ( 'dsflash-go', '{"protocol":"codex-app-server-jsonrpc-stdio","transport":"stdio","command":"codex app-server --listen stdio://","models":["dsflash-go"],"requiredSecretKeys":["auth.json", "config.toml"]}'::jsonb, '{"mode":"manual-runner-v0.1","maxConcurrentRuns":4}'::jsonb, '{"status":"registered"}'::jsonb, now() ) ON CONFLICT (profile) DO UPDATE SET capabilities = EXCLUDED.capabilities, capacity = EXCLUDED.capacity, health = EXCLUDED.health, updated_at = EXCLUDED.updated_at;
INSERT INTO agentrun_schema_migrations (id, checksum) VALUES ('008_v01_dsflash_go_backend_profile', 'seed-checksum');

-- migration 009_v01_dsflash_go_model_catalog
INSERT INTO agentrun_backends (profile, capabilities, capacity, health, updated_at) VALUES ( 'dsflash-go', '{"protocol":"codex-app-server-jsonrpc-stdio","transport":"stdio","command":"codex app-server --listen stdio://","models":["dsflash-go"],"requiredSecretKeys":["config.toml"]}'::jsonb, '{"mode":"manual-runner-v0.1","maxConcurrentRuns":4}'::jsonb, '{"status":"registered"}'::jsonb, now() ) ON CONFLICT (profile) DO UPDATE SET capabilities = EXCLUDED.capabilities, capacity = EXCLUDED.capacity, health = EXCLUDED.health, updated_at = EXCLUDED.updated_at;
INSERT INTO agentrun_schema_migrations (id, checksum) VALUES ('009_v01_dsflash_go_model_catalog', 'seed-checksum');

-- migration 010_v01_queue_session_ref
ALTER TABLE agentrun_queue_tasks
  ADD COLUMN IF NOT EXISTS session_ref jsonb;
INSERT INTO agentrun_schema_migrations (id, checksum) VALUES ('010_v01_queue_session_ref', 'seed-checksum');

-- migration 011_v01_cancel_lifecycle
ALTER TABLE agentrun_runs ADD COLUMN IF NOT EXISTS cancel_epoch integer NOT NULL DEFAULT 0;
ALTER TABLE agentrun_runs ADD COLUMN IF NOT EXISTS cancel_request_id text;
ALTER TABLE agentrun_runs ADD COLUMN IF NOT EXISTS cancel_requested_at timestamptz;
ALTER TABLE agentrun_runs ADD COLUMN IF NOT EXISTS cancel_reason text;

ALTER TABLE agentrun_commands ADD COLUMN IF NOT EXISTS cancel_epoch integer NOT NULL DEFAULT 0;
ALTER TABLE agentrun_commands ADD COLUMN IF NOT EXISTS cancel_request_id text;
ALTER TABLE agentrun_commands ADD COLUMN IF NOT EXISTS cancel_requested_at timestamptz;
ALTER TABLE agentrun_commands ADD COLUMN IF NOT EXISTS cancel_reason text;

CREATE TABLE IF NOT EXISTS agentrun_cancel_requests (
  id text PRIMARY KEY,
  target_kind text NOT NULL,
  target_id text NOT NULL,
  run_id text REFERENCES agentrun_runs(id) ON DELETE CASCADE,
  command_id text REFERENCES agentrun_commands(id) ON DELETE SET NULL,
  session_id text,
  task_id text,
  reason text NOT NULL,
  requested_by text,
  epoch integer NOT NULL,
  stage text NOT NULL,
  metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS agentrun_cancel_requests_target_idx ON agentrun_cancel_requests (target_kind, target_id, created_at DESC);
CREATE INDEX IF NOT EXISTS agentrun_cancel_requests_run_idx ON agentrun_cancel_requests (run_id, created_at DESC);
CREATE INDEX IF NOT EXISTS agentrun_cancel_requests_command_idx ON agentrun_cancel_requests (command_id, created_at DESC);
INSERT INTO agentrun_schema_migrations (id, checksum) VALUES ('011_v01_cancel_lifecycle', 'seed-checksum');

-- migration 014_v02_queue_attempt_history_retry
CREATE TABLE IF NOT EXISTS agentrun_queue_attempts (
  attempt_id text NOT NULL,
  task_id text NOT NULL REFERENCES agentrun_queue_tasks(id) ON DELETE CASCADE,
  retry_index integer NOT NULL CHECK (retry_index >= 0),
  state text NOT NULL CHECK (state IN ('reserved', 'pending', 'running', 'completed', 'failed', 'blocked', 'cancelled')),
  idempotency_key text,
  reason text,
  payload_hash text NOT NULL,
  previous_attempt_id text,
  run_id text,
  command_id text,
  runner_job_id text,
  session_id text,
  session_path text,
  failure_kind text,
  failure_message text,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  activated_at timestamptz,
  terminal_at timestamptz,
  PRIMARY KEY (task_id, attempt_id),
  UNIQUE (task_id, retry_index)
);

CREATE UNIQUE INDEX IF NOT EXISTS agentrun_queue_attempts_retry_key_idx
  ON agentrun_queue_attempts (task_id, idempotency_key)
  WHERE idempotency_key IS NOT NULL;

CREATE UNIQUE INDEX IF NOT EXISTS agentrun_queue_attempts_active_idx
  ON agentrun_queue_attempts (task_id)
  WHERE state IN ('reserved', 'running');

CREATE INDEX IF NOT EXISTS agentrun_queue_attempts_history_idx
  ON agentrun_queue_attempts (task_id, retry_index DESC, created_at DESC);

INSERT INTO agentrun_queue_attempts (
  attempt_id, task_id, retry_index, state, idempotency_key, reason, payload_hash,
  previous_attempt_id, run_id, command_id, runner_job_id, session_id, session_path,
  failure_kind, failure_message, created_at, updated_at, activated_at, terminal_at
)
SELECT
  latest_attempt->>'attemptId', id, 0, latest_attempt->>'state', NULL, NULL, payload_hash,
  NULL, latest_attempt->>'runId', latest_attempt->>'commandId', latest_attempt->>'runnerJobId',
  latest_attempt->>'sessionId', latest_attempt->>'sessionPath', latest_attempt->>'failureKind', latest_attempt->>'failureMessage',
  created_at, updated_at, updated_at,
  CASE WHEN latest_attempt->>'state' IN ('completed', 'failed', 'blocked', 'cancelled') THEN updated_at ELSE NULL END
FROM agentrun_queue_tasks
WHERE latest_attempt IS NOT NULL
  AND NULLIF(latest_attempt->>'attemptId', '') IS NOT NULL
ON CONFLICT (task_id, attempt_id) DO NOTHING;
INSERT INTO agentrun_schema_migrations (id, checksum) VALUES ('014_v02_queue_attempt_history_retry', 'seed-checksum');
