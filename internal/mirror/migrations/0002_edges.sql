-- AX audit mirror, schema version 2: dependency edges in their own table.
-- Task records no longer carry their dependents (a record's size must not
-- grow with its fan-out); each task's creation event names its depends_on,
-- and the mirror writes one row per edge from it. ax_tasks.dependents keeps
-- what records written before this version carried.

CREATE TABLE IF NOT EXISTS ax_edges (
  upstream_id  VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  dependent_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  PRIMARY KEY (upstream_id, dependent_id),
  KEY ax_edges_dependent (dependent_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='AX: one row per depends_on edge (upstream -> dependent)';
