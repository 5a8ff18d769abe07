package task

import (
	"testing"
	"time"
)

func TestTransitionTable(t *testing.T) {
	allowed := map[[2]State]bool{}
	for _, from := range States() {
		for _, to := range Transitions(from) {
			allowed[[2]State{from, to}] = true
		}
	}
	for _, from := range States() {
		for _, to := range States() {
			got := CanTransition(from, to)
			if got != allowed[[2]State{from, to}] {
				t.Errorf("CanTransition(%s, %s) = %v, table says %v", from, to, got, !got)
			}
			// Failed may be re-driven; Cancelled re-opened (→ waiting) by
			// its upstream's re-drive with dependents.
			if from.Terminal() && from != Failed && !(from == Cancelled && to == Waiting) && got {
				t.Errorf("terminal %s may move to %s", from, to)
			}
		}
		if got := CanTransition("", from); got != (from == Waiting || from == Ready || from == Cancelled || from == Expired) {
			t.Errorf("create in %s = %v", from, got)
		}
	}
	// The moves the orchestrator relies on.
	for _, m := range [][2]State{{Waiting, Ready}, {Ready, Running}, {Running, Succeeded}, {Running, Retrying},
		{Retrying, Ready}, {Running, Failed}, {Failed, Ready}, {Running, Running}, {Waiting, Cancelled}, {Cancelled, Waiting},
		// An attempt that ended before anything marked it running.
		{Ready, Succeeded}, {Ready, Retrying}, {Ready, Waiting}} {
		if !CanTransition(m[0], m[1]) {
			t.Errorf("%s -> %s must be allowed", m[0], m[1])
		}
	}
	for _, m := range [][2]State{{Succeeded, Ready}, {Cancelled, Ready}, {Waiting, Running}, {Retrying, Running}, {Retrying, Succeeded}} {
		if CanTransition(m[0], m[1]) {
			t.Errorf("%s -> %s must be refused", m[0], m[1])
		}
	}
}

// TestTablesCannotBeChangedByCallers: the slices handed out are copies, so
// an importer cannot change what the orchestrator allows.
func TestTablesCannotBeChangedByCallers(t *testing.T) {
	States()[0] = "hijacked"
	Transitions(Succeeded)
	tos := Transitions(Waiting)
	tos[0] = Succeeded
	_ = append(Transitions(Cancelled), Ready)
	initial := Transitions("")
	initial[0] = Running
	if States()[0] != Waiting || Transitions(Waiting)[0] != Ready || CanTransition(Cancelled, Ready) || CanTransition("", Running) {
		t.Fatal("a caller changed the state tables through a returned slice")
	}
	if len(States()) != 8 || !Waiting.Valid() || State("hijacked").Valid() {
		t.Fatalf("states %v", States())
	}
}

// TestEndsAttempt: which events close an attempt — out of running, or out
// of ready by a report (the record then has StartedAt) — and which do not.
func TestEndsAttempt(t *testing.T) {
	started := time.Now()
	ran := Task{StartedAt: &started}
	for _, c := range []struct {
		ev   Event
		want bool
	}{
		{Event{Kind: KindTransition, From: Running, To: Succeeded}, true},
		{Event{Kind: KindTransition, From: Running, To: Running}, false},
		{Event{Kind: KindTransition, From: Ready, To: Running, Task: ran}, false},
		{Event{Kind: KindTransition, From: Ready, To: Succeeded, Task: ran}, true},
		{Event{Kind: KindTransition, From: Ready, To: Retrying, Task: ran}, true},
		{Event{Kind: KindTransition, From: Ready, To: Cancelled}, false},
		{Event{Kind: KindTransition, From: Ready, To: Ready}, false},
		{Event{Kind: KindTransition, From: Ready, To: Ready, Task: ran}, false},
		{Event{Kind: KindDependentAdded, From: Running, To: Running}, false},
	} {
		if got := c.ev.EndsAttempt(); got != c.want {
			t.Errorf("%s %s→%s (started %v) ends an attempt = %v, want %v", c.ev.Kind, c.ev.From, c.ev.To, c.ev.Task.StartedAt != nil, got, c.want)
		}
	}
}
