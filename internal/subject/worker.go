package subject

import (
	"encoding/base64"
	"strings"
)

// BucketWorkers is the executors' registry: one key per running executor
// (WorkerKey) holding its announcement (task.Worker: capabilities, handled
// types, capacity, what runs on it now and since when, its version and
// last heartbeat). Each announcement is written with a per-key TTL, so the
// key of an executor that stopped heart-beating expires; one that stops
// cleanly purges its key. Nothing decides anything from it: it is what
// operators see (`ax workers`, the console's Workers page, "running on"
// in `ax status`).
const BucketWorkers = "AX_WORKERS"

// WorkerKey is the key of an executor's announcement in BucketWorkers:
// <capability>.<executor id, unpadded base64url>, capability being the
// executor's first. The capability scopes who may write it (an executor
// user writes only its capabilities' keys: deploy/security); the id is
// encoded so that any id (a host name with dots, say) is one key token.
func WorkerKey(capability, executorID string) string {
	return capability + "." + base64.RawURLEncoding.EncodeToString([]byte(executorID))
}

// WorkerKeyCapability matches the keys of the executors whose first
// capability is capability.
func WorkerKeyCapability(capability string) string { return capability + ".*" }

// ParseWorkerKey is the inverse of WorkerKey.
func ParseWorkerKey(key string) (capability, executorID string, ok bool) {
	capability, enc, ok := strings.Cut(key, ".")
	if !ok || capability == "" || enc == "" {
		return "", "", false
	}
	id, err := base64.RawURLEncoding.DecodeString(enc)
	return capability, string(id), err == nil && len(id) > 0
}

// KVKey is the subject a key-value bucket stores key under: $KV.<bucket>.<key>.
// Writers that need a per-key TTL publish there (nats.go's Put has none).
func KVKey(bucket, key string) string { return "$KV." + bucket + "." + key }
