-- AX transactional outbox, schema version 1.
-- Statements are separated by a semicolon at the end of a line. Every
-- statement is idempotent so an interrupted migration can simply run again.

CREATE TABLE IF NOT EXISTS ax_outbox (
  id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'relay order',
  task_id    VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the task id (a graph: its first task id), fixed at enqueue',
  subject    VARCHAR(600) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'task.submit.<type> or task.graph.submit',
  body       MEDIUMBLOB   NOT NULL COMMENT 'the spec (or graph) JSON, published as is',
  tasks      INT          NOT NULL DEFAULT 1 COMMENT 'tasks in the submission (a graph: its size)',
  created_at DATETIME(6)  NOT NULL COMMENT 'UTC, when the row was written',
  sent_at    DATETIME(6)  NULL COMMENT 'UTC, when JetStream acknowledged the publish; NULL while pending',
  attempts   INT          NOT NULL DEFAULT 0 COMMENT 'failed publishes of this row',
  last_error VARCHAR(1024) NULL COMMENT 'the last failed publish',
  PRIMARY KEY (id),
  KEY ax_outbox_pending (sent_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='AX: task submissions written in business transactions, published by ax relay';
