package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/task"
)

// TestExecutorThroughput is an ax-bench-style figure for each adapter's
// executor: AX_CONFORMANCE_BENCH=N no-op tasks (conf.behave, one
// "succeed" step) submitted at once with the Go SDK's SubmitMany to a real
// orchestrator process, run by one executor process of capacity 512;
// tasks/s from the first submit to the last success (counted from the
// tasks' histories), and the executor process's CPU time per task. The
// adapters take turns (AX_CONFORMANCE_BENCH_ROUNDS rounds, default 3),
// each on a fresh capability. Skipped unless AX_CONFORMANCE_BENCH is set:
// it measures, it asserts only that every task succeeded.
func TestExecutorThroughput(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("AX_CONFORMANCE_BENCH"))
	if n <= 0 || testing.Short() {
		t.Skip("set AX_CONFORMANCE_BENCH=<tasks> to measure the executors")
	}
	rounds, _ := strconv.Atoi(os.Getenv("AX_CONFORMANCE_BENCH_ROUNDS"))
	rounds = max(rounds, 1)
	if os.Getenv("AX_CONFORMANCE_BENCH_ROUNDS") == "" {
		rounds = 3
	}
	ads := adapters(t)
	e := startEnv(t, false)
	var lines []string
	for round := 1; round <= rounds; round++ {
		for _, ad := range ads {
			rate, cpu := benchRound(t, e, ad, fmt.Sprintf("%s-bench%d", ad.name, round), n)
			line := fmt.Sprintf("round %d %-3s %6d tasks: %7.0f tasks/s, executor CPU %5.1f µs/task", round, ad.name, n, rate,
				float64(cpu.Microseconds())/float64(n))
			t.Log(line)
			lines = append(lines, line)
		}
	}
	fmt.Println(strings.Join(lines, "\n"))
}

func benchRound(t *testing.T, e *env, ad adapter, capability string, n int) (float64, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := append(e.userEnv(""), "AX_CAPABILITY="+capability, "AX_EXECUTOR_ID="+capability, "AX_CAPACITY=512", "AX_ACK_WAIT_MS=30000")
	p, _, out := startProc(t, e.dir, capability, ad.executor, env, false)
	if err := waitLine(ctx, p, out, func(l string) bool { return strings.TrimSpace(l) == "ready" }); err != nil {
		t.Fatal(err)
	}
	// Count the successes of this capability's tasks as they are recorded.
	var done atomic.Int64
	finished := make(chan struct{})
	cons, err := e.js.OrderedConsumer(ctx, "AX_TASKS", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"ax.task.*.e"}, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var ev struct {
			To   task.State `json:"to"`
			Task struct {
				Capability string `json:"capability"`
			} `json:"task"`
		}
		if json.Unmarshal(m.Data(), &ev) == nil && ev.To == task.Succeeded && ev.Task.Capability == capability {
			if done.Add(1) == int64(n) {
				close(finished)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	payload := json.RawMessage(`{"steps":[{"do":"succeed"}]}`)
	specs := make([]task.Spec, n)
	for i := range specs {
		specs[i] = task.Spec{ID: fmt.Sprintf("%s-%d", capability, i), Type: "conf.behave", Capability: capability, Payload: payload}
	}
	start := time.Now()
	if _, err := e.client.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	select {
	case <-finished:
	case <-ctx.Done():
		t.Fatalf("%s: %d of %d tasks succeeded", capability, done.Load(), n)
	}
	elapsed := time.Since(start)
	if err := p.term(30 * time.Second); err != nil {
		t.Error(err)
	}
	st := p.cmd.ProcessState
	return float64(n) / elapsed.Seconds(), st.UserTime() + st.SystemTime()
}
