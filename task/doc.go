// Package task is AX's task model: the spec a producer submits, the record the
// orchestrator keeps, the states a task moves through and the table of allowed
// transitions between them, and the messages exchanged on the wire.
//
// It is a leaf package with no I/O: the sdk, the orchestrator and the executor
// all share it, and subjects.md documents the JSON it produces.
package task
