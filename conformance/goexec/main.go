// Command goexec is the Go adapter of the conformance suite (package
// conformance): an executor process and a producer process built on AX's
// Go SDK, driven by the suite as a process of any other language would be.
// The protocol every adapter speaks is described in conformance/README.md.
//
//	goexec executor   # run the conformance handlers until SIGTERM
//	goexec producer   # answer JSON requests on stdin, one per line
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/codec"
	"github.com/ax-run/ax/conformance"
	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: goexec executor|producer")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch os.Args[1] {
	case "executor":
		err = runExecutor(ctx)
	case "producer":
		err = runProducer(ctx)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "goexec:", err)
		os.Exit(1)
	}
}

// connect dials AX_NATS_URL as AX_CREDS, or AX_USER and AX_PASSWORD,
// with the inbox prefix AX_INBOX_PREFIX, when set.
func connect(name string) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}
	if creds := os.Getenv("AX_CREDS"); creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	if u := os.Getenv("AX_USER"); u != "" {
		opts = append(opts, nats.UserInfo(u, os.Getenv("AX_PASSWORD")))
	}
	if p := os.Getenv("AX_INBOX_PREFIX"); p != "" {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	nc, err := nats.Connect(os.Getenv("AX_NATS_URL"), opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", os.Getenv("AX_NATS_URL"), err)
	}
	return nc, nil
}

// codecFromEnv is the AES-256-GCM codec of the keys in AX_CODEC_KEYS
// ("<key id> <base64 secret>" lines, the first current), nil without.
func codecFromEnv() (*codec.AESGCM, error) {
	text := os.Getenv("AX_CODEC_KEYS")
	if text == "" {
		return nil, nil
	}
	keys, err := codec.ParseKeys([]byte(text))
	if err != nil {
		return nil, err
	}
	return codec.NewAESGCM(keys[0], keys[1:]...)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// step is one run's behaviour (conformance/README.md, "The behave handler").
type step struct {
	Do      string          `json:"do"`
	Error   string          `json:"error"`
	Result  json.RawMessage `json:"result"`
	DelayMS int             `json:"delay_ms"`
	MS      int             `json:"ms"`
	Bytes   int             `json:"bytes"`
	// Attempts is how many attempts a "flaky" step fails.
	Attempts int `json:"attempts"`
	// A "durable" step's durable steps, in order (README.md).
	Names      []string `json:"names"`
	FailAfter  []string `json:"fail_after"`
	BlockAfter string   `json:"block_after"`
	SleepAfter string   `json:"sleep_after"`
	BigStep    string   `json:"big_step"`
	PauseAfter string   `json:"pause_after"`
}

// stepValue is what a "durable" step's fn returns (pad: big_step's bytes).
type stepValue struct {
	Step    string `json:"step"`
	Attempt int    `json:"attempt"`
	Pad     string `json:"pad,omitempty"`
}

type behaviour struct {
	Steps []step `json:"steps"`
}

// event is what the handler tells the suite, on conformance.events.<capability>.
type event = conformance.Event

func runExecutor(ctx context.Context) error {
	nc, err := connect("conformance-go-executor")
	if err != nil {
		return err
	}
	defer nc.Close()
	capability := os.Getenv("AX_CAPABILITY")
	id := os.Getenv("AX_EXECUTOR_ID")
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := executor.Config{ID: id, Capabilities: []string{capability},
		Capacity: float64(envInt("AX_CAPACITY", 4)), AckWait: time.Duration(envInt("AX_ACK_WAIT_MS", 30000)) * time.Millisecond,
		Logger: log}
	aes, err := codecFromEnv()
	if err != nil {
		return err
	}
	if aes != nil {
		cfg.Codec = codec.AcceptClear(aes)
	}
	ex, err := executor.New(nc, cfg)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	runs := map[string]int{}
	emit := func(ev event) {
		data, _ := json.Marshal(ev)
		_ = nc.Publish("conformance.events."+capability, data)
	}
	behave := func(ctx context.Context, job *executor.Job) (any, error) {
		at := float64(time.Now().UnixNano()) / 1e6
		mu.Lock()
		runs[job.ID]++
		run := runs[job.ID]
		mu.Unlock()
		ev := event{ID: job.ID, Attempt: job.Attempt, ExecutionID: job.ExecutionID, Executor: id, Priority: job.Priority, Run: run}
		ev.Event, ev.AtMS = "started", at
		emit(ev)
		ev.AtMS = 0
		var b behaviour
		if err := json.Unmarshal(job.Payload, &b); err != nil || len(b.Steps) == 0 {
			return nil, executor.Permanent(fmt.Errorf("payload is no behaviour: %v", err))
		}
		s := b.Steps[min(run, len(b.Steps))-1]
		aborted := func() error {
			ev.Event, ev.Reason = "aborted", context.Cause(ctx).Error()
			emit(ev)
			return ctx.Err()
		}
		switch s.Do {
		case "succeed":
			return s.Result, nil
		case "fail":
			return nil, errors.New(s.Error)
		case "flaky": // by the task's attempt, whichever process runs it
			if job.Attempt <= s.Attempts {
				return nil, errors.New(s.Error)
			}
			return s.Result, nil
		case "permanent":
			return nil, executor.Permanent(errors.New(s.Error))
		case "retry_after":
			return nil, executor.RetryAfter(time.Duration(s.DelayMS)*time.Millisecond, errors.New(s.Error))
		case "snooze":
			return nil, executor.Snooze(time.Duration(s.DelayMS) * time.Millisecond)
		case "cancel":
			return nil, executor.Cancel(errors.New(s.Error))
		case "block":
			<-ctx.Done()
			return nil, aborted()
		case "sleep":
			select {
			case <-time.After(time.Duration(s.MS) * time.Millisecond):
				ev.Event = "finished"
				emit(ev)
				return s.Result, nil
			case <-ctx.Done():
				return nil, aborted()
			}
		case "inputs":
			in, err := job.Inputs(ctx)
			if err != nil {
				return nil, err
			}
			out := make([]map[string]any, len(in))
			for i, u := range in {
				out[i] = map[string]any{"id": u.ID, "state": u.State, "result": u.Result}
			}
			return out, nil
		case "big":
			return strings.Repeat("x", s.Bytes), nil
		case "durable":
			// Durable steps: each fn emits step_ran; after a step whose fn
			// ran in this run, fail (fail_after) or block until aborted
			// (block_after, emitting blocked); after sleep_after, a
			// durable sleep of ms. The result lists each step's value as
			// Step returned it (a stored one in later runs).
			out := make([]map[string]any, 0, len(s.Names))
			for _, name := range s.Names {
				ran := false
				v, err := executor.Step(ctx, job, name, func(context.Context) (stepValue, error) {
					ran = true
					e := ev
					e.Event, e.Step = "step_ran", name
					emit(e)
					sv := stepValue{Step: name, Attempt: job.Attempt}
					if name == s.BigStep {
						sv.Pad = strings.Repeat("x", s.Bytes)
					}
					return sv, nil
				})
				if errors.Is(err, executor.ErrAttemptLost) {
					e := ev
					e.Event, e.Step, e.Reason = "lost", name, "handler not aborted"
					if ctx.Err() != nil {
						e.Reason = "handler aborted"
					}
					emit(e)
				}
				if err != nil {
					return nil, err
				}
				out = append(out, map[string]any{"step": v.Step, "attempt": v.Attempt, "pad_bytes": len(v.Pad)})
				switch {
				case ran && slices.Contains(s.FailAfter, name):
					return nil, fmt.Errorf("crash after %s", name)
				case ran && name == s.BlockAfter:
					e := ev
					e.Event, e.Step = "blocked", name
					emit(e)
					<-ctx.Done()
					return nil, aborted()
				case ran && name == s.PauseAfter:
					// Paused (not aborted) until the suite's release.
					sub, err := nc.SubscribeSync("conformance.release." + job.ID)
					if err != nil {
						return nil, err
					}
					e := ev
					e.Event, e.Step = "blocked", name
					emit(e)
					_, err = sub.NextMsgWithContext(ctx)
					_ = sub.Unsubscribe()
					if err != nil {
						return nil, aborted()
					}
				case name == s.SleepAfter:
					if err := job.Sleep(ctx, time.Duration(s.MS)*time.Millisecond); err != nil {
						return nil, err
					}
				}
			}
			return out, nil
		case "upstream_sizes":
			sizes := make([]int, len(job.DependsOn))
			for i, up := range job.DependsOn {
				raw, err := job.UpstreamResultRaw(ctx, up)
				if err != nil {
					return nil, err
				}
				sizes[i] = len(raw)
			}
			return sizes, nil
		}
		return nil, executor.Permanent(fmt.Errorf("unknown step %q", s.Do))
	}
	ex.HandleFunc("conf.behave", behave)
	// A shardable type: the planner's shards are the payload's "shards"
	// (each a behaviour, run by behave); the aggregator returns how many
	// succeeded and the byte length of each shard's result (JSON; 0 for
	// one that did not succeed), read through the SDK (object store
	// included).
	plan := func(ctx context.Context, job *executor.Job) ([]executor.Shard, error) {
		var p struct {
			Shards []json.RawMessage `json:"shards"`
		}
		if err := json.Unmarshal(job.Payload, &p); err != nil {
			return nil, executor.Permanent(err)
		}
		out := make([]executor.Shard, len(p.Shards))
		for i, s := range p.Shards {
			out[i] = executor.Shard{Payload: s}
		}
		return out, nil
	}
	ex.HandleShards("conf.sharded", executor.Sharded{Plan: plan, Shard: behave,
		Aggregate: func(ctx context.Context, job *executor.Job, shards *executor.ShardOutcomes) (any, error) {
			sizes := make([]int, len(shards.Shards))
			for i, o := range shards.Shards {
				if o.State == task.Succeeded {
					raw, err := shards.Result(ctx, i)
					if err != nil {
						return nil, err
					}
					sizes[i] = len(raw)
				}
			}
			return map[string]any{"succeeded": shards.Succeeded, "sizes": sizes}, nil
		}})
	ex.HandleShards("conf.sharded_plain", executor.Sharded{Plan: plan, Shard: behave})
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := ex.Start(startCtx); err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	stopCtx, cancelStop := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelStop()
	return ex.Stop(stopCtx)
}

// request is one line of the producer's input.
type request struct {
	Seq       int               `json:"seq"`
	Op        string            `json:"op"`
	Spec      json.RawMessage   `json:"spec"`
	Specs     []json.RawMessage `json:"specs"`
	Type      string            `json:"type"`
	ID        string            `json:"id"`
	Reason    string            `json:"reason"`
	TimeoutMS int               `json:"timeout_ms"`
	Codec     bool              `json:"codec"`
	Subject   string            `json:"subject"`
	Data      json.RawMessage   `json:"data"`
}

func runProducer(ctx context.Context) error {
	nc, err := connect("conformance-go-producer")
	if err != nil {
		return err
	}
	defer nc.Close()
	c, err := sdk.New(ctx, nc)
	if err != nil {
		return err
	}
	c.Caller = os.Getenv("AX_CALLER")
	// A second client encodes payloads, for requests with "codec": true.
	encoding, err := sdk.New(ctx, nc)
	if err != nil {
		return err
	}
	encoding.Caller = c.Caller
	if aes, err := codecFromEnv(); err != nil {
		return err
	} else if aes != nil {
		encoding.Codec = aes
	}
	var outMu sync.Mutex
	out := json.NewEncoder(os.Stdout)
	reply := func(v map[string]any) {
		outMu.Lock()
		defer outMu.Unlock()
		_ = out.Encode(v)
	}
	fmt.Println(`{"ready":true}`)
	var wg sync.WaitGroup
	defer wg.Wait()
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			reply(map[string]any{"error": "bad request: " + err.Error()})
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := c
			if req.Codec {
				client = encoding
			}
			rep := handle(ctx, client, req)
			rep["seq"] = req.Seq
			reply(rep)
		}()
	}
	return sc.Err()
}

func decodeSpec(raw json.RawMessage) (task.Spec, error) {
	var s task.Spec
	err := json.Unmarshal(raw, &s)
	return s, err
}

func handle(ctx context.Context, c *sdk.Client, req request) map[string]any {
	timeout := time.Duration(max(req.TimeoutMS, 1000)) * time.Millisecond
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fail := func(err error) map[string]any {
		rep := map[string]any{"error": err.Error()}
		var ce *sdk.CommandError
		if errors.As(err, &ce) {
			rep["code"] = ce.Code
		}
		return rep
	}
	switch req.Op {
	case "submit":
		s, err := decodeSpec(req.Spec)
		if err != nil {
			return fail(err)
		}
		id, err := c.Submit(ctx, s)
		if err != nil {
			return fail(err)
		}
		return map[string]any{"id": id}
	case "submit_graph", "submit_many":
		specs := make([]task.Spec, len(req.Specs))
		for i, raw := range req.Specs {
			s, err := decodeSpec(raw)
			if err != nil {
				return fail(err)
			}
			specs[i] = s
		}
		submit := c.SubmitMany
		if req.Op == "submit_graph" {
			submit = c.SubmitGraph
		}
		ids, err := submit(ctx, specs)
		if err != nil {
			return fail(err)
		}
		return map[string]any{"ids": ids}
	case "state", "wait":
		var t *task.Task
		var err error
		if req.Op == "state" {
			t, err = c.State(ctx, req.Type, req.ID)
		} else {
			t, err = c.WaitState(ctx, req.Type, req.ID)
		}
		if err != nil {
			return fail(err)
		}
		return map[string]any{"task": t}
	case "result":
		raw, err := c.Result(ctx, req.ID)
		if err != nil {
			return fail(err)
		}
		return map[string]any{"result": raw}
	case "signal":
		seq, err := c.Signal(ctx, req.Subject, req.Data)
		if err != nil {
			return fail(err)
		}
		return map[string]any{"seq": seq}
	case "cancel":
		t, err := c.Cancel(ctx, req.ID, req.Reason)
		if err != nil {
			return fail(err)
		}
		return map[string]any{"task": t}
	}
	return map[string]any{"error": fmt.Sprintf("unknown op %q", req.Op)}
}
