package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/testenv"
)

// TestBenchCommands runs `ax bench` and its subcommands for real with tiny
// workloads, each on its own embedded server: every task must end, and the
// JSON output keeps the -o json contract.
func TestBenchCommands(t *testing.T) {
	t.Setenv(envMySQLDSN, "")
	ctx := testenv.Context(t, 5*time.Minute)
	run := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(ctx, append([]string{"--log-level", "error"}, args...)...)
		if code != 0 {
			t.Fatalf("ax %s: exit %d: %s%s", strings.Join(args, " "), code, errOut, out)
		}
		return out
	}

	t.Run("bench", func(t *testing.T) {
		args := []string{"bench", "--tasks", "30", "--rate", "20", "--duration", "1s", "--delayed", "2", "--backlog", "3", "--capacity", "16", "--bare", "0"}
		var res struct {
			Phases []struct {
				Name         string  `json:"name"`
				Tasks        int     `json:"tasks"`
				TasksPerSec  float64 `json:"tasks_per_sec"`
				DelayedTasks int     `json:"delayed_tasks"`
				Backlog      int     `json:"backlog"`
				SubmitToDone struct {
					P50, Max time.Duration
				} `json:"submit_to_done"`
			} `json:"phases"`
		}
		out := run(append(args, "-o", "json")...)
		checkJSONContract(t, "bench", out)
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("bench -o json: %v\n%s", err, out)
		}
		for _, p := range res.Phases {
			if p.Tasks < 1 || p.TasksPerSec <= 0 || p.SubmitToDone.Max <= 0 || p.SubmitToDone.P50 > p.SubmitToDone.Max {
				t.Errorf("phase %s: %+v", p.Name, p)
			}
		}
		if len(res.Phases) != 3 {
			t.Fatalf("phases %+v, want throughput, steady and the backlog probe", res.Phases)
		}
		if p := res.Phases[0]; p.Name != "throughput" || p.Tasks != 30 {
			t.Errorf("throughput phase %+v, want 30 tasks", p)
		}
		if p := res.Phases[1]; !strings.HasPrefix(p.Name, "steady 20/s") || p.DelayedTasks != 2 {
			t.Errorf("steady phase %+v, want 20/s with 2 delayed tasks", p)
		}
		if p := res.Phases[2]; !strings.HasPrefix(p.Name, "backlog") || p.Backlog != 3 || p.Tasks != 4 {
			t.Errorf("backlog probe %+v, want 3 p5 tasks and a p0", p)
		}
		// The table form of a throughput-only run.
		table := run("bench", "--tasks", "10", "--rate", "0", "--delayed", "0", "--bare", "300")
		for _, want := range []string{"phase", "tasks/s", "throughput", "stored per task during throughput", "bare JetStream on the same server", "AX's throughput is"} {
			if !strings.Contains(table, want) {
				t.Errorf("bench table lacks %q:\n%s", want, table)
			}
		}
	})

	t.Run("shards", func(t *testing.T) {
		out := run("bench", "shards", "--sizes", "20", "--capacity", "16", "-o", "json")
		checkJSONContract(t, "bench shards", out)
		var runs []struct {
			Shards        int           `json:"shards"`
			Total         time.Duration `json:"total"`
			ReadsPerShard float64       `json:"reads_per_shard"`
		}
		if err := json.Unmarshal([]byte(out), &runs); err != nil {
			t.Fatalf("bench shards -o json: %v\n%s", err, out)
		}
		if len(runs) != 1 || runs[0].Shards != 20 || runs[0].Total <= 0 || runs[0].ReadsPerShard <= 0 {
			t.Fatalf("bench shards: %+v", runs)
		}
		if table := run("bench", "shards", "--sizes", "5"); !strings.Contains(table, "reads/shard") || !strings.Contains(table, "5") {
			t.Errorf("bench shards table:\n%s", table)
		}
	})

	t.Run("producer", func(t *testing.T) {
		dsn, _ := mirrortest.DB(t)
		out := run("bench", "producer", "--tasks", "50", "--calls", "50", "--mysql-dsn", dsn, "--outbox-rows", "40", "-o", "json")
		checkJSONContract(t, "bench producer", out)
		var res struct {
			SubmitNs        float64 `json:"submit_ns"`
			Tasks           int     `json:"tasks"`
			TasksPerSec     float64 `json:"tasks_per_sec"`
			OutboxRows      int     `json:"outbox_rows"`
			RelayRowsPerSec float64 `json:"relay_rows_per_sec"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("bench producer -o json: %v\n%s", err, out)
		}
		if res.SubmitNs <= 0 || res.Tasks != 50 || res.TasksPerSec <= 0 || res.OutboxRows != 40 || res.RelayRowsPerSec <= 0 {
			t.Fatalf("bench producer: %+v", res)
		}
		if table := run("bench", "producer", "--tasks", "20", "--calls", "20"); !strings.Contains(table, "Submitter rate") || strings.Contains(table, "Outbox") {
			t.Errorf("bench producer table without MySQL:\n%s", table)
		}
	})
}
