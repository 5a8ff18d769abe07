// Package mirror copies the task histories of the AX_TASKS stream into MySQL
// (or MariaDB) so operators can query them with SQL.
//
// JetStream stays the source of truth; the mirror is just another durable
// consumer (subject.ConsumerMirror) and never slows task processing down.
// Every AX_TASKS message is one task.Event; its stream sequence is globally
// unique and increasing, and is the idempotency key of everything written:
//
//   - ax_events has one row per event, keyed by the sequence, so a replayed
//     or redelivered event is a no-op;
//   - ax_tasks has the current row of each task and is only overwritten by an
//     event with a higher sequence than the one it holds (last_seq);
//   - ax_attempts has one row per execution attempt, keyed by execution id,
//     with the same last_seq guard.
//
// Because every row is a pure function of the events and the guards make
// the result independent of delivery order, several mirror processes may
// share the consumer, a crashed mirror may redeliver a batch, and Rebuild
// replaying the whole stream into an empty database gives the same tables
// as the live mirror.
//
// Messages are fetched in batches and each batch is written in one
// transaction with multi-row statements, then acknowledged. While MySQL is
// unreachable nothing is acknowledged: the batch is retried with backoff and
// the growing lag is logged and reported by Lag.
package mirror
