-- AX audit mirror, schema version 5: event tasks (a spec's wait_for), one
-- row per event task, from every event of its history: the event it waits
-- for (wait_for.subject and .match), when its wait was registered and when
-- it times out, and how it ended — the event that arrived (its AX_EVENTS
-- sequence and data) or an operator's approval or rejection (who, why).
-- The newest event of the task decides the row, as for ax_tasks.

CREATE TABLE IF NOT EXISTS ax_event_waits (
  task_id         VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  type            VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  subject         VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'wait_for.subject',
  match_token     VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'wait_for.match: the event is ax.event.<subject>.<match_token>',
  timeout_ms      BIGINT       NOT NULL COMMENT 'wait_for.timeout',
  outcome         VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'pending (its dependencies or start time hold it), waiting, event, approved, rejected, expired, cancelled',
  waiting_since   DATETIME(6)  NULL COMMENT 'UTC, when its wait was registered',
  timeout_at      DATETIME(6)  NULL COMMENT 'UTC, when it expires (its timeout, or its earlier deadline)',
  event_seq       BIGINT UNSIGNED NULL COMMENT 'the AX_EVENTS sequence of the event that arrived',
  event_data      JSON         NULL COMMENT 'the event''s data (the task''s result)',
  ended_at        DATETIME(6)  NULL COMMENT 'UTC, when the event, the decision, the timeout or a cancel ended it',
  decided_by      VARCHAR(255) NULL COMMENT 'who approved or rejected it',
  decision_reason TEXT         NULL,
  updated_at      DATETIME(6)  NOT NULL COMMENT 'UTC, the task''s latest event',
  last_seq        BIGINT UNSIGNED NOT NULL COMMENT 'the event the row is as of',
  PRIMARY KEY (task_id),
  KEY ax_event_waits_subject (subject, match_token),
  KEY ax_event_waits_outcome (outcome, timeout_at),
  KEY ax_event_waits_updated (updated_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='AX: one row per event task (wait_for): its wait and how it ended'
