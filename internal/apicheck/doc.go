// Package apicheck holds the tests that keep AX's public API usable by
// code outside the module: no exported identifier of the public packages
// (sdk, executor, orchestrator, task, axtest, outbox) may mention a type
// from an internal/ package or from a logging or metrics library (zerolog,
// Prometheus) an embedder would be forced to adopt; none of them may link
// such a library at all (checked on the dependency graph the go command
// reports); every exported name is documented; and the complete programs in
// the package documentation compile.
package apicheck
