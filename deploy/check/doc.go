// Package check holds the tests of what deploy/ ships for containers: the
// Helm chart deploy/helm/ax (rendered and linted through the Helm Go
// module, every manifest decoded strictly into the Kubernetes API types,
// the KEDA ScaledObject into KEDA's and the PrometheusRule into the
// Prometheus Operator's) and the compose file deploy/compose (loaded by
// compose-go, the Compose specification's reference loader, every
// command and flag checked against the real ax and nats-server).
//
// It is a module of its own so that Helm, client-go, KEDA and compose-go
// stay out of AX's go.mod; scripts/test runs it: cd deploy/check && go
// test ./...
package check
