-- AX audit mirror, schema version 1.
-- Statements are separated by a semicolon at the end of a line. Every
-- statement is idempotent so an interrupted migration can simply run again.

CREATE TABLE IF NOT EXISTS ax_events (
  seq          BIGINT UNSIGNED NOT NULL COMMENT 'AX_TASKS stream sequence: the task revision after this event',
  task_id      VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  type         VARCHAR(600) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  kind         VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'transition or dependent_added',
  from_state   VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'NULL when the event created the task',
  to_state     VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  at           DATETIME(6)  NOT NULL COMMENT 'UTC',
  attempt      INT          NOT NULL,
  execution_id VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
  actor        VARCHAR(255) NOT NULL COMMENT 'executor id (claims) or orchestrator node id',
  reason       TEXT         NULL,
  PRIMARY KEY (seq),
  KEY ax_events_task (task_id, seq),
  KEY ax_events_at (at),
  KEY ax_events_type_to (type, to_state, at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='AX: one row per task event';

CREATE TABLE IF NOT EXISTS ax_tasks (
  id           VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  type         VARCHAR(600) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  state        VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  priority     INT          NOT NULL,
  capability   VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  attempt      INT          NOT NULL,
  max_retries  INT          NOT NULL,
  redrives     INT          NOT NULL,
  reason       TEXT         NULL,
  last_error   TEXT         NULL COMMENT 'error of the last failed attempt of the current series',
  executor     VARCHAR(255) NULL,
  execution_id VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
  submitted_at DATETIME(6)  NOT NULL,
  ready_at     DATETIME(6)  NULL COMMENT 'first time the task became ready',
  started_at   DATETIME(6)  NULL COMMENT 'start of the current attempt',
  finished_at  DATETIME(6)  NULL,
  retry_at     DATETIME(6)  NULL,
  start_at     DATETIME(6)  NULL COMMENT 'a delayed task becomes ready then (delay, run_at)',
  expires_at   DATETIME(6)  NULL COMMENT 'an unfinished task expires then (deadline, ttl)',
  dispatches   INT          NOT NULL COMMENT 'dispatches of the current attempt (dispatch_timeout)',
  updated_at   DATETIME(6)  NOT NULL,
  state_since  DATETIME(6)  NOT NULL COMMENT 'when the task entered its current state',
  depends_on   JSON         NOT NULL,
  dependents   JSON         NOT NULL,
  parent_id    VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'reserved for shards',
  shard_id     VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'reserved for shards',
  last_seq     BIGINT UNSIGNED NOT NULL COMMENT 'sequence of the event this row reflects',
  PRIMARY KEY (id),
  KEY ax_tasks_state (state, state_since),
  KEY ax_tasks_type_state (type, state),
  KEY ax_tasks_updated (updated_at),
  KEY ax_tasks_parent (parent_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='AX: current row per task';

CREATE TABLE IF NOT EXISTS ax_attempts (
  execution_id VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  task_id      VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  type         VARCHAR(600) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  attempt      INT          NOT NULL,
  executor     VARCHAR(255) NULL COMMENT 'the executor that ran it last (after a takeover, the new one)',
  started_at   DATETIME(6)  NOT NULL COMMENT 'first claim',
  finished_at  DATETIME(6)  NULL,
  outcome      VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'running, succeeded, failed, cancelled, expired',
  error        TEXT         NULL,
  last_seq     BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (execution_id),
  KEY ax_attempts_task (task_id, started_at),
  KEY ax_attempts_finished (finished_at),
  KEY ax_attempts_type_outcome (type, outcome, finished_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='AX: one row per claimed execution attempt';
