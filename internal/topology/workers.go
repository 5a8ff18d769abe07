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

// workersBucket is the executors' registry (subject.BucketWorkers): one
// value per key, per-key TTLs (LimitMarkerTTL turns them on). On disk like
// the rest of the topology: in memory, a server restart took the bucket
// with it, and executors, which wait for the topology at start, waited for
// an orchestrator to create it again (an announcement every few seconds
// per executor costs the disk next to nothing).
func workersBucket(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         subject.BucketWorkers,
		Description:    "AX executors' registry: one announcement per running executor, expiring when it stops heart-beating",
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       replicas,
		LimitMarkerTTL: WorkersMarkerTTL,
	}
}
