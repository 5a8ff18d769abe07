package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// TestMirrorKill9MidBatch: an `ax mirror` process is killed with kill -9
// while it writes batches under load, twice; a new one catches up with every
// event exactly once (the sequence has no gap) and every task row equal to
// the task's final state in JetStream.
func TestMirrorKill9MidBatch(t *testing.T) {
	dsn, db := mirrortest.DB(t)
	c := newCluster(t)
	c.startServer()
	// demo.flaky fails every first attempt, which would open its breaker.
	orc := c.newProc("orc-1", "orchestrator", "--nats", c.url, "--node-id", "orc-1", "--log-level", logLevel(),
		"--retry-base", "100ms", "--retry-max", "500ms", "--breaker-threshold", "1")
	orc.start()
	c.startWorker("worker-1", "--capacity", "64")
	nc, cl := c.connect()
	warmUp(t, cl, "default")
	mirrorProc := c.newProc("mirror", "mirror", "--nats", c.url, "--mysql-dsn", dsn, "--log-level", logLevel(), "--ack-wait", "3s")
	mirrorProc.start()

	const n = 1500
	specs := make([]task.Spec, n)
	for i := range specs {
		s, _ := task.New("demo.noop", nil)
		if i%5 == 0 {
			s, _ = task.New("demo.flaky", map[string]int{"fail_times": 1})
		}
		s.ID = fmt.Sprintf("mirrored-%04d", i)
		specs[i] = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rows := func() int {
		var k int
		_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_events").Scan(&k)
		return k
	}
	for kill, chunk := 0, n/3; kill < 3; kill++ {
		if _, err := cl.SubmitMany(ctx, specs[kill*chunk:(kill+1)*chunk]); err != nil {
			t.Fatal(err)
		}
		if kill == 2 {
			break
		}
		before := rows()
		eventually(t, time.Minute, "the mirror writing", func() (bool, string) {
			k := rows()
			return k > before+100, fmt.Sprintf("%d rows", k)
		})
		mirrorProc.kill9()
		mirrorProc.start()
	}
	for _, s := range specs {
		got, err := cl.Wait(ctx, s.ID)
		if err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v", s.ID, got, err)
		}
	}
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := info.State.LastSeq
	eventually(t, time.Minute, "the mirror catching up", func() (bool, string) {
		var count, maxSeq sql.NullInt64
		_ = db.QueryRowContext(ctx, "SELECT COUNT(*), MAX(seq) FROM ax_events").Scan(&count, &maxSeq)
		return uint64(count.Int64) == last && uint64(maxSeq.Int64) == last, fmt.Sprintf("%d rows, max seq %d, stream at %d", count.Int64, maxSeq.Int64, last)
	})
	var bad int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_tasks WHERE id LIKE 'mirrored-%' AND state <> 'succeeded'").Scan(&bad); err != nil {
		t.Fatal(err)
	}
	var tasks int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_tasks WHERE id LIKE 'mirrored-%'").Scan(&tasks); err != nil {
		t.Fatal(err)
	}
	if bad != 0 || tasks != n {
		t.Fatalf("ax_tasks has %d of %d tasks, %d not succeeded", tasks, n, bad)
	}
}
