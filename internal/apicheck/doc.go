// Package apicheck holds a test that keeps AX's public API free of types a
// user cannot name: no exported identifier of the public packages (sdk,
// executor, orchestrator, task) may mention a type from an internal/
// package, or a logging library an embedder would be forced to adopt.
package apicheck
