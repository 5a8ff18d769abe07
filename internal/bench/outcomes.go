package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// outcome is a task's transition to a terminal state, seen on AX_TASKS.
type outcome struct {
	ID      string
	State   task.State
	At      time.Time
	Payload json.RawMessage
}

// terminalMarks are the bytes a terminal transition carries: only those
// are decoded.
var terminalMarks = [][]byte{
	[]byte(`"to":"succeeded"`), []byte(`"to":"failed"`), []byte(`"to":"cancelled"`), []byte(`"to":"expired"`),
}

// watchOutcomes calls fn (from one goroutine) for every transition to a
// terminal state stored in the task histories from now on, until ctx
// ends or stop is called.
func watchOutcomes(ctx context.Context, nc *nats.Conn, fn func(outcome)) (stop func(), _ error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cons, err := js.OrderedConsumer(ctx, subject.StreamTasks, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject.TaskAll}, DeliverPolicy: jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("watch outcomes: %w", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		data := msg.Data()
		terminal := false
		for _, m := range terminalMarks {
			if bytes.Contains(data, m) {
				terminal = true
				break
			}
		}
		if !terminal {
			return
		}
		var ev eventHead
		if json.Unmarshal(data, &ev) != nil || !ev.To.Terminal() {
			return
		}
		fn(outcome{ID: ev.Task.ID, State: ev.To, At: ev.At, Payload: ev.Task.Payload})
	}, jetstream.PullMaxMessages(4096))
	if err != nil {
		return nil, fmt.Errorf("watch outcomes: %w", err)
	}
	return cc.Stop, nil
}

// embeddedServer starts an embedded server (url empty) for one run, as
// serverURL, under a temporary directory named after pattern.
func embeddedServer(url, pattern string) (string, func(), error) {
	u, stop, err := serverURL(url, pattern, false, false)
	if err != nil {
		return "", nil, fmt.Errorf("bench: start a server: %w", err)
	}
	return u, stop, nil
}

// median returns the median of v (0 when empty); v is sorted in place.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// eventHead is what the bench decodes of a task event: its target state,
// time, and the task's id and payload.
type eventHead struct {
	To   task.State `json:"to"`
	At   time.Time  `json:"at"`
	Task struct {
		ID      string          `json:"id"`
		Payload json.RawMessage `json:"payload"`
	} `json:"task"`
}
