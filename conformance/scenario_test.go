package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/ax-run/ax/codec"
	"github.com/ax-run/ax/task"
)

// scenario is one scenarios/*.json file (README.md describes the format).
type scenario struct {
	Name  string `json:"name"`
	About string `json:"about"`
	// Auth runs the scenario on a server with the users of `ax
	// nats-accounts`: each process connects as its role's user, with only
	// its rights (capability <adapter>-perm). At most one such scenario:
	// they share the capability. Handlers' events are not seen there.
	Auth bool `json:"auth"`
	// Executor configures the scenario's executors.
	Executor struct {
		Capacity  int `json:"capacity"`
		AckWaitMS int `json:"ack_wait_ms"`
	} `json:"executor"`
	// Tasks are submitted by the adapter's producer (together with
	// submit_many when SubmitMany).
	Tasks      []taskDef `json:"tasks"`
	SubmitMany bool      `json:"submit_many"`
	// SubmitGraph submits the tasks as one graph (submit_graph): all of
	// it is created, or all of it rejected.
	SubmitGraph bool `json:"submit_graph"`
	// Script runs in order. Without a "submit" step, executor "a" is
	// started and the tasks are submitted before it.
	Script []step    `json:"script"`
	Expect []expect  `json:"expect"`
	Order  []ordered `json:"order"`
	// MaxRunning: at most this many of the scenario's handlers ran at
	// once, and that many did at some point (from the handlers' started
	// and finished events: "sleep" steps emit finished).
	MaxRunning int `json:"max_running"`
}

// taskDef is a task of a scenario: its spec, without id and capability
// (the suite sets them), type conf.behave unless given.
type taskDef struct {
	Key  string         `json:"key"`
	Spec map[string]any `json:"spec"`
	// DependsOn lists upstreams by key, replaced by their ids.
	DependsOn []string `json:"depends_on"`
	// Encode submits the task through the producer's codec (its payload
	// encoded with AX_CODEC_KEYS).
	Encode bool `json:"encode"`
}

// step is one action of a scenario's script.
type step struct {
	Do       string `json:"do"`
	Executor string `json:"executor"`
	Task     string `json:"task"`
	Reason   string `json:"reason"`
	Run      int    `json:"run"`
	// State is what a cancel's reply must say (default cancelled); Code
	// the refusal's code when the cancel must be refused.
	State string `json:"state"`
	Code  string `json:"code"`
	// Subject and Data are a "signal" step's event ("$scope" in Subject
	// replaced as in specs), published through the producer.
	Subject string          `json:"subject"`
	Data    json.RawMessage `json:"data"`
}

// expect is what a task's history must show once it ended.
type expect struct {
	Task           string          `json:"task"`
	State          string          `json:"state"`
	Attempt        *int            `json:"attempt"`
	Result         json.RawMessage `json:"result"`
	Errors         []string        `json:"errors"`
	ReasonContains string          `json:"reason_contains"`
	DeadLetter     *bool           `json:"dead_letter"`
	Takeovers      *int            `json:"takeovers"`
	Executor       string          `json:"executor"`
	Started        *int            `json:"started"`
	Aborted        *int            `json:"aborted"`
	DuplicateOf    string          `json:"duplicate_of"`
	Snoozes        *int            `json:"snoozes"`
	// Backoff: every retry was scheduled after the failure that caused
	// it (retry_at later than the failure's event).
	Backoff bool `json:"backoff"`
	// Record lists record fields that must have these values.
	Record map[string]json.RawMessage `json:"record"`
	// NoStart: the handler never started.
	NoStart bool `json:"no_start"`
	// ResultBytes: the result (JSON) has this many bytes, read by the
	// suite and by the producer's "result" (from the object store when
	// the record names one); ResultObject: the record names one.
	ResultBytes  int  `json:"result_bytes"`
	ResultObject bool `json:"result_object"`
	// PayloadEncoded: the record holds the payload encoded (an "ax_codec"
	// object) that the suite's Go codec decodes to the spec's payload.
	PayloadEncoded bool `json:"payload_encoded"`
	// StepRuns: how often each durable step's fn ran (its "step_ran"
	// events, of every executor process), and no other step's fn ran.
	StepRuns map[string]int `json:"step_runs"`
	// Steps: the record's durable steps and sleeps, in order.
	Steps []expectStep `json:"steps"`
	// Sleeps: the durable sleeps in its history (transitions to
	// retrying that spent no attempt).
	Sleeps *int `json:"sleeps"`
	// Lost: how often a step of its handler was refused lost (the
	// attempt no longer the executor's), each with the handler's
	// cancellation signal fired.
	Lost *int `json:"lost"`
}

// expectStep is a durable step (or sleep) the record must hold.
type expectStep struct {
	Name     string `json:"name"`
	Attempt  int    `json:"attempt"`
	Executor string `json:"executor"`
	// ResultObject: its result is in the object store, named as the
	// contract says (steps/<id>/<execution_id>/<h>), with a digest.
	ResultObject bool `json:"result_object"`
	// SleepUntil: a sleep, with its end.
	SleepUntil bool `json:"sleep_until"`
}

// ordered says every task in Before started before every task in After.
type ordered struct {
	Before []string `json:"before"`
	After  []string `json:"after"`
}

// run is one scenario under one adapter.
type scenarioRun struct {
	t          *testing.T
	e          *env
	ad         adapter
	pr         *producer
	sc         scenario
	capability string
	scope      string
	ids        map[string]string
	execs      map[string]*proc
	types      map[string]string
}

func runScenario(t *testing.T, e *env, ad adapter, pr *producer, sc scenario) {
	r := &scenarioRun{t: t, e: e, ad: ad, pr: pr, sc: sc, capability: ad.name + "-" + sc.Name,
		ids: map[string]string{}, execs: map[string]*proc{}, types: map[string]string{}}
	if sc.Auth {
		r.capability = ad.name + "-perm"
	}
	nonce := strings.ToLower(nuid.Next()[14:])
	r.scope = r.capability + "-" + nonce
	for _, td := range sc.Tasks {
		r.ids[td.Key] = r.capability + "-" + td.Key + "-" + nonce
	}
	defer r.stopExecutors()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	script := sc.Script
	if !hasStep(script, "submit") {
		script = append([]step{{Do: "start_executor", Executor: "a"}, {Do: "submit"}}, script...)
	}
	for _, s := range script {
		if err := r.do(ctx, s); err != nil {
			t.Fatalf("step %+v: %v", s, err)
		}
	}
	for _, x := range sc.Expect {
		r.check(ctx, x)
	}
	for _, o := range sc.Order {
		r.checkOrder(o)
	}
	if sc.MaxRunning > 0 {
		r.checkMaxRunning(sc.MaxRunning)
	}
}

// checkMaxRunning checks the most handlers of the scenario's tasks that
// ran at once, from their events in the order received.
func (r *scenarioRun) checkMaxRunning(want int) {
	ids := map[string]bool{}
	for _, id := range r.ids {
		ids[id] = true
	}
	running, most := 0, 0
	r.e.events.mu.Lock()
	for _, ev := range r.e.events.all {
		if !ids[ev.ID] {
			continue
		}
		switch ev.Event {
		case "started":
			running++
			most = max(most, running)
		case "finished", "aborted":
			running--
		}
	}
	r.e.events.mu.Unlock()
	if most != want {
		r.t.Errorf("at most %d handlers ran at once, want %d", most, want)
	}
}

func hasStep(script []step, do string) bool {
	for _, s := range script {
		if s.Do == do {
			return true
		}
	}
	return false
}

func (r *scenarioRun) executorID(name string) string { return r.capability + "-" + name }

func (r *scenarioRun) do(ctx context.Context, s step) error {
	switch s.Do {
	case "start_executor":
		return r.startExecutor(ctx, s.Executor)
	case "stop_executor":
		p := r.execs[s.Executor]
		if p == nil {
			return fmt.Errorf("no executor %q", s.Executor)
		}
		return p.term(30 * time.Second)
	case "kill9":
		p := r.execs[s.Executor]
		if p == nil {
			return fmt.Errorf("no executor %q", s.Executor)
		}
		p.kill9(r.t)
		return nil
	case "submit":
		return r.submit(ctx)
	case "await_started":
		_, err := r.awaitEvent(ctx, "started", s)
		return err
	case "await_aborted":
		_, err := r.awaitEvent(ctx, "aborted", s)
		return err
	case "await_blocked":
		_, err := r.awaitEvent(ctx, "blocked", s)
		return err
	case "await_lost":
		_, err := r.awaitEvent(ctx, "lost", s)
		return err
	case "sigstop", "sigcont":
		p := r.execs[s.Executor]
		if p == nil {
			return fmt.Errorf("no executor %q", s.Executor)
		}
		sig := syscall.SIGSTOP
		if s.Do == "sigcont" {
			sig = syscall.SIGCONT
		}
		return p.cmd.Process.Signal(sig)
	case "release":
		// Lets a handler paused after a step (pause_after) go on.
		return r.e.nc.Publish("conformance.release."+r.ids[s.Task], nil)
	case "signal":
		subj := strings.ReplaceAll(s.Subject, "$scope", r.scope)
		rep, err := r.pr.call(ctx, map[string]any{"op": "signal", "subject": subj, "data": s.Data, "timeout_ms": 30000})
		if err != nil {
			return fmt.Errorf("signal %s: %w", subj, err)
		}
		var seq uint64
		if err := json.Unmarshal(rep["seq"], &seq); err != nil || seq == 0 {
			return fmt.Errorf("signal %s replied seq %s", subj, rep["seq"])
		}
		return nil
	case "cancel":
		rep, err := r.pr.call(ctx, map[string]any{"op": "cancel", "id": r.ids[s.Task], "reason": s.Reason, "timeout_ms": 30000})
		if s.Code != "" {
			var code string
			_ = json.Unmarshal(rep["code"], &code)
			if err == nil || code != s.Code {
				return fmt.Errorf("cancel: want a refusal with code %q, got %v (code %q)", s.Code, err, code)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("cancel: %w", err)
		}
		var t task.Task
		if err := json.Unmarshal(rep["task"], &t); err != nil {
			return fmt.Errorf("cancel reply: %w", err)
		}
		want := s.State
		if want == "" {
			want = "cancelled"
		}
		if string(t.State) != want {
			return fmt.Errorf("cancel replied with state %s, want %s", t.State, want)
		}
		return nil
	case "forge":
		return r.forge(ctx, s)
	case "await_state":
		return r.awaitState(ctx, s)
	}
	return fmt.Errorf("unknown step %q", s.Do)
}

func (r *scenarioRun) startExecutor(ctx context.Context, name string) error {
	if p := r.execs[name]; p != nil && p.alive() {
		return fmt.Errorf("executor %s already runs", name)
	}
	capacity, ackWait := r.sc.Executor.Capacity, r.sc.Executor.AckWaitMS
	if capacity == 0 {
		capacity = 4
	}
	if ackWait == 0 {
		ackWait = 30000
	}
	env := append(r.e.userEnv("executor-"+r.capability), "AX_CAPABILITY="+r.capability, "AX_EXECUTOR_ID="+r.executorID(name),
		"AX_CAPACITY="+strconv.Itoa(capacity), "AX_ACK_WAIT_MS="+strconv.Itoa(ackWait))
	p, _, out := startProc(r.t, r.e.dir, r.executorID(name), r.ad.executor, env, false)
	r.execs[name] = p
	return waitLine(ctx, p, out, func(l string) bool { return strings.TrimSpace(l) == "ready" })
}

// stopExecutors drains the scenario's executors (SIGTERM: each must exit
// cleanly) unless they were killed.
func (r *scenarioRun) stopExecutors() {
	for _, p := range r.execs {
		if err := p.term(30 * time.Second); err != nil {
			r.t.Errorf("%v", err)
		}
		if r.t.Failed() {
			r.t.Logf("----- tail of %s -----\n%s", p.name, tail(p.logPath, 30))
		}
	}
}

// spec is a task's spec as the producer submits it.
func (r *scenarioRun) spec(td taskDef) map[string]any {
	// "$scope" is unique to this run of the scenario (unique keys are
	// per type, and event subjects global, shared by every adapter's run),
	// replaced at any depth.
	raw, _ := json.Marshal(td.Spec)
	s := map[string]any{}
	_ = json.Unmarshal([]byte(strings.ReplaceAll(string(raw), "$scope", r.scope)), &s)
	if _, ok := s["type"]; !ok {
		s["type"] = "conf.behave"
	}
	s["id"] = r.ids[td.Key]
	s["capability"] = r.capability
	if len(td.DependsOn) > 0 {
		deps := make([]string, len(td.DependsOn))
		for i, k := range td.DependsOn {
			deps[i] = r.ids[k]
		}
		s["depends_on"] = deps
	}
	r.types[td.Key] = s["type"].(string)
	return s
}

func (r *scenarioRun) submit(ctx context.Context) error {
	if r.sc.SubmitMany || r.sc.SubmitGraph {
		specs := make([]map[string]any, len(r.sc.Tasks))
		for i, td := range r.sc.Tasks {
			specs[i] = r.spec(td)
		}
		op := "submit_many"
		if r.sc.SubmitGraph {
			op = "submit_graph"
		}
		rep, err := r.pr.call(ctx, map[string]any{"op": op, "specs": specs})
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		var ids []string
		if err := json.Unmarshal(rep["ids"], &ids); err != nil || len(ids) != len(specs) {
			return fmt.Errorf("%s replied %s", op, rep["ids"])
		}
		for i, td := range r.sc.Tasks {
			if ids[i] != r.ids[td.Key] {
				return fmt.Errorf("%s returned id %s for %s, want %s", op, ids[i], td.Key, r.ids[td.Key])
			}
		}
		return nil
	}
	for _, td := range r.sc.Tasks {
		rep, err := r.pr.call(ctx, map[string]any{"op": "submit", "spec": r.spec(td), "codec": td.Encode})
		if err != nil {
			return fmt.Errorf("submit %s: %w", td.Key, err)
		}
		var id string
		if err := json.Unmarshal(rep["id"], &id); err != nil || id != r.ids[td.Key] {
			return fmt.Errorf("submit %s returned id %s, want %s", td.Key, rep["id"], r.ids[td.Key])
		}
	}
	return nil
}

func (r *scenarioRun) awaitEvent(ctx context.Context, kind string, s step) (event, error) {
	id := r.ids[s.Task]
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	ev, err := r.e.events.await(ctx, func(ev event) bool {
		return ev.ID == id && ev.Event == kind && (s.Executor == "" || ev.Executor == r.executorID(s.Executor)) &&
			(s.Run == 0 || ev.Run == s.Run)
	})
	if err != nil {
		return ev, fmt.Errorf("no %s event of %s: %w", kind, s.Task, err)
	}
	return ev, nil
}

// awaitState waits until the record of s.Task (of every task when empty)
// is in s.State, reading the history as the suite does.
func (r *scenarioRun) awaitState(ctx context.Context, s step) error {
	keys := []string{s.Task}
	if s.Task == "" {
		keys = keys[:0]
		for _, td := range r.sc.Tasks {
			keys = append(keys, td.Key)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, k := range keys {
		for {
			t, err := r.e.client.Get(ctx, r.ids[k])
			if err == nil && string(t.State) == s.State {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s not %s (last: %v, %v)", k, s.State, t, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// forge plays a rogue executor against a task whose handler runs: a claim
// and a report of its execution with a forged execution token, each of
// which the orchestrator must refuse.
func (r *scenarioRun) forge(ctx context.Context, s step) error {
	ev, err := r.awaitEvent(ctx, "started", step{Task: s.Task})
	if err != nil {
		return err
	}
	id, typ := ev.ID, r.types[s.Task]
	forged := "AAAAAAAAAAAAAAAAAAAAAA"
	claim, _ := json.Marshal(task.ClaimRequest{ID: id, ExecutionID: ev.ExecutionID, Executor: "rogue", StartedAt: time.Now().UTC(),
		Delivered: 2, Token: forged})
	msg, err := r.e.nc.RequestWithContext(ctx, "ax.claim."+r.capability, claim)
	if err != nil {
		return fmt.Errorf("forged claim: %w", err)
	}
	var rep task.ClaimReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return err
	}
	if rep.Status == task.ClaimGranted {
		return fmt.Errorf("a claim with a forged token was granted: %s", msg.Data)
	}
	now := time.Now().UTC()
	report, _ := json.Marshal(task.Report{ID: id, Type: typ, ExecutionID: ev.ExecutionID, Attempt: ev.Attempt,
		Status: task.OutcomeSucceeded, Result: json.RawMessage(`"forged"`), Executor: "rogue", StartedAt: now, FinishedAt: now, Token: forged})
	if _, err := r.e.js.Publish(ctx, "task.completed."+typ, report); err != nil {
		return fmt.Errorf("forged report: %w", err)
	}
	// A forged report without any token, directly as well.
	report, _ = json.Marshal(task.Report{ID: id, Type: typ, ExecutionID: ev.ExecutionID, Attempt: ev.Attempt,
		Status: task.OutcomeFailed, Error: "forged", Permanent: true, Executor: "rogue", StartedAt: now, FinishedAt: now})
	if _, err := r.e.nc.RequestWithContext(ctx, "ax.direct.task.completed."+typ, report); err != nil {
		return fmt.Errorf("forged direct report: %w", err)
	}
	return nil
}

// check waits for the task's end through the adapter's producer (wait,
// by state) and checks its history, read by the suite itself.
func (r *scenarioRun) check(ctx context.Context, x expect) {
	t := r.t
	id := r.ids[x.Task]
	if id == "" {
		t.Fatalf("expect: no task %q", x.Task)
	}
	rep, err := r.pr.call(ctx, map[string]any{"op": "wait", "type": r.types[x.Task], "id": id, "timeout_ms": 60000})
	if err != nil {
		t.Errorf("%s: the producer's wait: %v", x.Task, err)
		return
	}
	var waited task.Task
	if err := json.Unmarshal(rep["task"], &waited); err != nil {
		t.Errorf("%s: the producer's wait replied %s: %v", x.Task, rep["task"], err)
		return
	}
	hist, err := r.e.client.History(ctx, id)
	if err != nil {
		t.Errorf("%s: history: %v", x.Task, err)
		return
	}
	last := hist[len(hist)-1].Event.Task
	if waited.State != last.State {
		t.Errorf("%s: the producer's wait says %s, the history %s", x.Task, waited.State, last.State)
	}
	// The task ends once, whatever happened on the way.
	ends := 0
	for _, h := range hist {
		if h.Event.Kind == task.KindTransition && h.Event.To.Terminal() && h.Event.From != h.Event.To {
			ends++
		}
	}
	if ends != 1 {
		t.Errorf("%s: %d terminal transitions in its history, want 1:\n%s", x.Task, ends, describe(hist))
	}
	if string(last.State) != x.State {
		t.Errorf("%s: state %s (%s), want %s:\n%s", x.Task, last.State, last.Reason, x.State, describe(hist))
	}
	if x.Attempt != nil && last.Attempt != *x.Attempt {
		t.Errorf("%s: attempt %d, want %d", x.Task, last.Attempt, *x.Attempt)
	}
	if x.Result != nil && !jsonEqual(last.Result, r.withIDs(x.Result)) {
		t.Errorf("%s: result %s, want %s", x.Task, last.Result, r.withIDs(x.Result))
	}
	if x.Errors != nil {
		if len(last.Errors) != len(x.Errors) {
			t.Errorf("%s: %d errors kept %+v, want %d", x.Task, len(last.Errors), last.Errors, len(x.Errors))
		} else {
			for i, want := range x.Errors {
				if !strings.Contains(last.Errors[i].Error, want) {
					t.Errorf("%s: error %d is %q, want it to contain %q", x.Task, i, last.Errors[i].Error, want)
				}
			}
		}
	}
	if x.ReasonContains != "" && !strings.Contains(last.Reason, x.ReasonContains) {
		t.Errorf("%s: reason %q, want it to contain %q", x.Task, last.Reason, x.ReasonContains)
	}
	if x.DeadLetter != nil {
		var err error
		var st jetstream.Stream
		if st, err = r.e.js.Stream(ctx, "AX_DLQ"); err == nil {
			_, err = st.GetLastMsgForSubject(ctx, "ax.dlq."+id)
		}
		has := err == nil
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("%s: dead letter: %v", x.Task, err)
		} else if has != *x.DeadLetter {
			t.Errorf("%s: dead letter %v, want %v", x.Task, has, *x.DeadLetter)
		}
	}
	if x.Takeovers != nil && last.Takeovers != *x.Takeovers {
		t.Errorf("%s: takeovers %d, want %d", x.Task, last.Takeovers, *x.Takeovers)
	}
	if x.Executor != "" && last.Executor != r.executorID(x.Executor) {
		t.Errorf("%s: executor %s, want %s", x.Task, last.Executor, r.executorID(x.Executor))
	}
	if x.Snoozes != nil && last.Snoozes != *x.Snoozes {
		t.Errorf("%s: snoozes %d, want %d", x.Task, last.Snoozes, *x.Snoozes)
	}
	if x.DuplicateOf != "" && last.DuplicateOf != r.ids[x.DuplicateOf] {
		t.Errorf("%s: duplicate_of %q, want %q", x.Task, last.DuplicateOf, r.ids[x.DuplicateOf])
	}
	evs := r.e.events.of(id)
	count := func(kind string) int {
		n := 0
		for _, ev := range evs {
			if ev.Event == kind {
				n++
			}
		}
		return n
	}
	if x.Started != nil && count("started") != *x.Started {
		t.Errorf("%s: its handler started %d times, want %d", x.Task, count("started"), *x.Started)
	}
	if x.NoStart && count("started") != 0 {
		t.Errorf("%s: its handler started, want never", x.Task)
	}
	if x.Aborted != nil && count("aborted") != *x.Aborted {
		t.Errorf("%s: its handler's signal aborted %d times, want %d (events %+v)", x.Task, count("aborted"), *x.Aborted, evs)
	}
	if x.Backoff {
		retries := 0
		for _, h := range hist {
			ev := h.Event
			if ev.Kind == task.KindTransition && ev.To == task.Retrying && ev.From != task.Retrying {
				retries++
				if ev.Task.RetryAt == nil || !ev.Task.RetryAt.After(ev.At) {
					t.Errorf("%s: a retry at %v scheduled at %v: no backoff", x.Task, ev.Task.RetryAt, ev.At)
				}
			}
		}
		if retries == 0 {
			t.Errorf("%s: no retry in its history", x.Task)
		}
	}
	if x.PayloadEncoded {
		r.checkEncoded(ctx, x.Task, last.Payload)
	}
	if x.StepRuns != nil {
		got := map[string]int{}
		for _, ev := range evs {
			if ev.Event == "step_ran" {
				got[ev.Step]++
			}
		}
		if !maps.Equal(got, x.StepRuns) {
			t.Errorf("%s: its steps' fns ran %v, want %v", x.Task, got, x.StepRuns)
		}
	}
	if x.Steps != nil {
		r.checkSteps(x.Task, last, x.Steps)
	}
	if x.Lost != nil {
		n := 0
		for _, ev := range evs {
			if ev.Event == "lost" {
				n++
				if ev.Reason != "handler aborted" {
					t.Errorf("%s: a step refused lost on %s, but %s", x.Task, ev.Executor, ev.Reason)
				}
			}
		}
		if n != *x.Lost {
			t.Errorf("%s: %d steps refused lost, want %d", x.Task, n, *x.Lost)
		}
	}
	if x.Sleeps != nil {
		n := 0
		for _, h := range hist {
			ev := h.Event
			if ev.Kind == task.KindTransition && ev.To == task.Retrying && strings.Contains(ev.Reason, "no attempt spent") {
				n++
			}
		}
		if n != *x.Sleeps {
			t.Errorf("%s: %d durable sleeps in its history, want %d:\n%s", x.Task, n, *x.Sleeps, describe(hist))
		}
	}
	if x.ResultObject {
		wantName := "results/" + id + "/" + last.ExecutionID
		if last.ResultObject != wantName || last.ResultBucket != "AX_OBJECTS_"+r.capability || !strings.HasPrefix(last.ResultDigest, "SHA-256=") {
			t.Errorf("%s: result object %q in %q (digest %q), want %q in AX_OBJECTS_%s", x.Task, last.ResultObject, last.ResultBucket,
				last.ResultDigest, wantName, r.capability)
		}
	}
	if x.ResultBytes > 0 {
		raw, err := r.e.client.Result(ctx, id)
		if err != nil || len(raw) != x.ResultBytes {
			t.Errorf("%s: the suite read a result of %d bytes (%v), want %d", x.Task, len(raw), err, x.ResultBytes)
		}
		rep, err := r.pr.call(ctx, map[string]any{"op": "result", "type": r.types[x.Task], "id": id, "timeout_ms": 30000})
		if err != nil || len(rep["result"]) != x.ResultBytes {
			t.Errorf("%s: the producer read a result of %d bytes (%v), want %d", x.Task, len(rep["result"]), err, x.ResultBytes)
		}
	}
	if len(x.Record) > 0 {
		raw, _ := json.Marshal(last)
		var rec map[string]json.RawMessage
		_ = json.Unmarshal(raw, &rec)
		for k, want := range x.Record {
			if !jsonEqual(rec[k], want) {
				t.Errorf("%s: record field %s is %s, want %s", x.Task, k, rec[k], want)
			}
		}
	}
}

// checkSteps checks the record's durable steps and sleeps against want, in order.
func (r *scenarioRun) checkSteps(key string, last task.Task, want []expectStep) {
	t := r.t
	if len(last.Steps) != len(want) {
		t.Errorf("%s: %d steps in the record %+v, want %d", key, len(last.Steps), last.Steps, len(want))
		return
	}
	for i, w := range want {
		st := last.Steps[i]
		if st.Name != w.Name || st.Attempt != w.Attempt || (w.Executor != "" && st.Executor != r.executorID(w.Executor)) {
			t.Errorf("%s: step %d is %q stored in attempt %d by %s, want %q in attempt %d by %s", key, i, st.Name, st.Attempt, st.Executor,
				w.Name, w.Attempt, r.executorID(w.Executor))
		}
		if w.ResultObject {
			name := task.StepObjectName(last.ID, st.ExecutionID, st.Name)
			if st.ResultObject != name || st.ResultBucket != "AX_OBJECTS_"+r.capability || !strings.HasPrefix(st.ResultDigest, "SHA-256=") ||
				len(st.Result) != 0 {
				t.Errorf("%s: step %s's result object %q in %q (digest %q, inline %d bytes), want %q in AX_OBJECTS_%s", key, st.Name,
					st.ResultObject, st.ResultBucket, st.ResultDigest, len(st.Result), name, r.capability)
			}
		} else if st.ResultObject != "" {
			t.Errorf("%s: step %s's result is an object %q, want it inline", key, st.Name, st.ResultObject)
		}
		if w.SleepUntil != (st.SleepUntil != nil) {
			t.Errorf("%s: step %s's sleep_until is %v", key, st.Name, st.SleepUntil)
		}
	}
}

// checkEncoded checks that a record's payload is encoded and decodes, with
// the suite's Go codec, to the payload the scenario submitted.
func (r *scenarioRun) checkEncoded(ctx context.Context, key string, payload json.RawMessage) {
	t := r.t
	if name, _, ok := codec.Encoded(payload); !ok || name != codec.AESGCMName {
		t.Errorf("%s: the record's payload is not encoded: %s", key, payload)
		return
	}
	keys, err := codec.ParseKeys([]byte(codecKeys))
	if err != nil {
		t.Fatal(err)
	}
	aes, err := codec.NewAESGCM(keys[0])
	if err != nil {
		t.Fatal(err)
	}
	plain, err := aes.Decode(ctx, payload)
	if err != nil {
		t.Errorf("%s: the suite's Go codec cannot decode the payload: %v", key, err)
		return
	}
	for _, td := range r.sc.Tasks {
		if td.Key == key {
			want, _ := json.Marshal(td.Spec["payload"])
			if !jsonEqual(plain, want) {
				t.Errorf("%s: the payload decodes to %s, want %s", key, plain, want)
			}
		}
	}
}

// checkOrder checks that every task of o.Before started before any of o.After.
func (r *scenarioRun) checkOrder(o ordered) {
	first := map[string]int{}
	r.e.events.mu.Lock()
	for i, ev := range r.e.events.all {
		if _, ok := first[ev.ID]; !ok && ev.Event == "started" {
			first[ev.ID] = i
		}
	}
	r.e.events.mu.Unlock()
	for _, b := range o.Before {
		for _, a := range o.After {
			ib, okb := first[r.ids[b]]
			ia, oka := first[r.ids[a]]
			if !okb || !oka {
				r.t.Errorf("order: %s or %s never started", b, a)
				continue
			}
			if ib > ia {
				r.t.Errorf("order: %s started after %s, want before", b, a)
			}
		}
	}
}

// withIDs replaces the strings "$id:<key>" in an expected value by the
// ids of the scenario's tasks.
func (r *scenarioRun) withIDs(v json.RawMessage) json.RawMessage {
	out := string(v)
	for k, id := range r.ids {
		out = strings.ReplaceAll(out, `"$id:`+k+`"`, strconv.Quote(id))
	}
	return json.RawMessage(out)
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}

func describe(hist []task.HistoryEntry) string {
	var b strings.Builder
	for _, h := range hist {
		fmt.Fprintf(&b, "  %d %s %s→%s %s (attempt %d, executor %s)\n", h.Revision, h.Event.Kind, h.Event.From, h.Event.To,
			h.Event.Reason, h.Event.Task.Attempt, h.Event.Task.Executor)
	}
	return b.String()
}
