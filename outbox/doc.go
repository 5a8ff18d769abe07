// Package outbox is AX's transactional outbox for MySQL and MariaDB: task
// submissions written in the same transaction as the business data they
// belong to, and a relay that publishes them to AX.
//
// The failure it removes is "the order was committed but its e-mail task
// was never submitted" (or the reverse, after a rollback). Enqueue writes a
// row into the ax_outbox table inside the caller's *sql.Tx; the row exists
// exactly when the transaction commits. A Relay (or the `ax relay` command)
// claims pending rows in batches with SELECT … FOR UPDATE SKIP LOCKED,
// publishes them to task.submit.<type> with pipelined JetStream publishes,
// marks them sent in the same transaction and deletes sent rows after a
// retention period.
//
// # Exactly one task per row
//
// Enqueue fixes the task id (a ULID when the spec has none) and the exact
// body to publish. A relay killed after publishing but before marking the
// rows sent publishes them again later, with the same body and the same
// Nats-Msg-Id: JetStream drops the copy within its duplicate window, and the
// orchestrator creates a task id only once whenever it arrives. Several
// relays may run at once: a row locked by one is skipped by the others, so
// no work is published twice while both live.
//
// # Use
//
//	tx, _ := db.BeginTx(ctx, nil)
//	_, _ = tx.ExecContext(ctx, "INSERT INTO orders …")
//	spec, _ := task.New("email.send", map[string]string{"order": "42"})
//	spec.ID = "order-42-mail"
//	if _, err := outbox.Enqueue(ctx, tx, spec); err != nil { … }
//	_ = tx.Commit()
//	_ = outbox.Notify(nc) // optional: wake the relays now instead of at their next poll
//
// The table comes from Migrate (embedded migrations; `ax relay` runs them)
// or, for applications with their own migration tool, from Schema.
//
// # Encrypted payloads
//
// With a payload codec (package codec), encode the payload before Enqueue,
// so the ax_outbox row, the relay and AX hold only the encoded form:
//
//	spec.Payload, err = codec.EncodePayload(ctx, c, spec.Payload)
//
// The relay needs no key; executors with the same codec decode it.
package outbox
