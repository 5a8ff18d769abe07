-- AX audit mirror, schema version 4: durable steps and sleeps
-- (executor.Job.Step, Job.Sleep), one row per step a task stored, from its
-- step events (kind "step") and its sleeps' events (to retrying, the sleep
-- its record's last step). A step's result is kept inline when it was
-- inline in the record (at most 4 KiB), else named by its object.

CREATE TABLE IF NOT EXISTS ax_steps (
  task_id       VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  name          VARCHAR(128) NOT NULL COMMENT 'the step''s name; sleeps are ax:sleep:<n>',
  kind          VARCHAR(8)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'step or sleep',
  attempt       INT          NOT NULL COMMENT 'the attempt that stored it',
  execution_id  VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  executor      VARCHAR(255) NULL,
  stored_at     DATETIME(6)  NOT NULL COMMENT 'UTC, when the orchestrator stored it',
  sleep_until   DATETIME(6)  NULL COMMENT 'a sleep''s end',
  result        JSON         NULL COMMENT 'an inline result',
  result_object VARCHAR(512) NULL COMMENT 'a larger result''s object, in result_bucket',
  result_bucket VARCHAR(255) NULL,
  result_digest VARCHAR(128) NULL,
  seq           BIGINT UNSIGNED NOT NULL COMMENT 'the event that stored it (or last moved a sleep''s end)',
  PRIMARY KEY (task_id, name),
  KEY ax_steps_stored (stored_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='AX: one row per durable step or sleep a task stored'
