package topology

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
)

// WorkersMarkerTTL is how long the workers registry keeps the marker of an
// announcement that expired or was removed, so that watchers (the console)
// see executors go.
const WorkersMarkerTTL = time.Minute

// workersBucket is the executors' registry (subject.BucketWorkers): in
// memory (announcements are rewritten every few seconds and a server
// restart costs one heartbeat of them), one value per key, per-key TTLs
// (LimitMarkerTTL turns them on).
func workersBucket(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         subject.BucketWorkers,
		Description:    "AX executors' registry: one announcement per running executor, expiring when it stops heart-beating",
		History:        1,
		Storage:        jetstream.MemoryStorage,
		Replicas:       replicas,
		LimitMarkerTTL: WorkersMarkerTTL,
	}
}
