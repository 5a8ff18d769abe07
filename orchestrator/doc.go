// Package orchestrator owns every task's state. It consumes submissions,
// attempt reports, fired timers and operator commands from JetStream; moves
// tasks through the state table with compare-and-set writes to their
// histories; releases DAG dependents; dispatches ready tasks onto
// task.ready.<capability>.p<N>; arms durable retry timers; and writes
// dead letters.
//
// Every handler is idempotent. A handler first makes its transition (a CAS
// write that fails harmlessly when the transition was already made) and then
// ensures the effects of the task's current state: a ready task has a ready
// message (de-duplicated by execution id), a retrying task has a timer (one
// schedule per subject), a failed task has a dead letter (one per subject),
// a succeeded task has released its dependents, a failed or cancelled task
// has cancelled them. A message is acknowledged only after both, so a crash
// at any point is repaired by redelivery. Several orchestrators may run
// against the same streams; they share the work.
package orchestrator
