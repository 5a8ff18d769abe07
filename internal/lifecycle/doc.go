// Package lifecycle is the orchestrator's transition table as pure
// functions: what a task's record becomes when something happens to it (an
// attempt's report, a timer, a command), and what must follow from a
// record being in its state (its effects). Nothing here reads or writes
// NATS: the orchestrator reads a record, asks a decision here, writes the
// next record with a compare-and-set, and applies the record's Effects;
// every path that moves a task goes through the same decisions, and the
// tests here cover every state and event without a server.
//
// A decision's Verdict says what the orchestrator does with it: Apply
// writes Next; Ignore leaves the task (the event is superseded, or not
// this task's); Replay makes sure the current record's effects happened
// (the event was applied already, its effects may not have been); Stale
// reads again (the record read is older than the event: a stream leader
// that was behind answered, and ignoring the event would strand the task);
// Refuse answers a command that the record does not allow.
//
// What is decided here: creation (Create), an attempt's report (Report),
// a claim (Claim), the retry, deadline and dispatch timers (RetryDue,
// DeadlinePassed, NotStarted), the reconciler's re-dispatch (Redispatch),
// commands (Cancel, Redrive, Reopen), dependencies (Resolve,
// UpstreamEnded, UpstreamMissing) and shards (ShardsEnded, ShardsFailed).
// What is not: admission — key limits, pauses and breakers, fairness —
// which keeps a ready or waiting task where it is with a reason (a record
// in the same state), and the bookkeeping records of a task's dependents
// and shards; those stay in the orchestrator.
package lifecycle
