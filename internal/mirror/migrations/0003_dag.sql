-- AX audit mirror, schema version 3: why a task of a DAG ran, did not run or
-- ran again. ax_tasks gains the dependent's trigger rule, the task's unique
-- key, the task a duplicate submission was a duplicate of, and the upstream
-- whose end cancelled it (cleared when a re-drive with dependents re-opens
-- it; its events keep the story).
--
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS, so the one ALTER (atomic) runs
-- only when its first column is missing: a migration interrupted after it
-- and before its version row can simply run again.
SET @ax_alter = IF(
  (SELECT COUNT(*) FROM information_schema.columns
   WHERE table_schema = DATABASE() AND table_name = 'ax_tasks' AND column_name = 'trigger_rule') > 0,
  'DO 0',
  'ALTER TABLE ax_tasks
     ADD COLUMN trigger_rule VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT ''all_succeeded, all_ended or any_failed; NULL without depends_on'' AFTER depends_on,
     ADD COLUMN unique_key VARCHAR(256) NULL COMMENT ''unique_key of the spec'' AFTER trigger_rule,
     ADD COLUMN duplicate_of VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT ''the task that held unique_key: this one was created cancelled and never ran'' AFTER unique_key,
     ADD COLUMN cancelled_by VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT ''the upstream whose end cancelled it (cleared when re-opened)'' AFTER duplicate_of,
     ADD KEY ax_tasks_unique_key (type, unique_key)');
PREPARE ax_alter_stmt FROM @ax_alter;
EXECUTE ax_alter_stmt;
DEALLOCATE PREPARE ax_alter_stmt;
