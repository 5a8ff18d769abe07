package plan

import (
	"fmt"
	"testing"
)

func TestMake(t *testing.T) {
	for _, tc := range []struct {
		name       string
		in         Inputs
		backlog    float64
		concurrent float64
		executors  int
		margin     string
	}{
		// The notes' own example: 5,000 tasks/s waiting 10 s is a 50,000
		// backlog; running 0.5 s needs 2,500 slots, 13 executors of 200.
		{"notes", Inputs{Rate: 5000, Wait: 10, Exec: 0.5, Slots: 200}, 50000, 2500, 13, "[17 19]"},
		{"exact fit", Inputs{Rate: 100, Wait: 0, Exec: 1, Slots: 50}, 0, 100, 2, "[3 3]"},
		{"idle", Inputs{Rate: 0, Wait: 5, Exec: 2, Slots: 16}, 0, 0, 0, "[0 0]"},
		{"one margin", Inputs{Rate: 10, Wait: 1, Exec: 3, Slots: 4, Margins: []float64{1}}, 10, 30, 8, "[15]"},
	} {
		p, err := Make(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if p.Backlog != tc.backlog || p.Concurrency != tc.concurrent || p.Executors != tc.executors || fmt.Sprint(p.WithMargin) != tc.margin {
			t.Errorf("%s: backlog %v concurrency %v executors %d with margins %v", tc.name, p.Backlog, p.Concurrency, p.Executors, p.WithMargin)
		}
	}
	for _, bad := range []Inputs{{Rate: -1, Slots: 1}, {Rate: 1, Slots: 0}, {Rate: 1, Exec: -1, Slots: 1}} {
		if _, err := Make(bad); err == nil {
			t.Errorf("Make(%+v) accepted", bad)
		}
	}
}

func TestAutoscaling(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Inputs
		want Autoscaling
	}{
		// The notes' example: an executor of 200 slots runs 400 tasks/s
		// and drains 4,000 in 10 s; the 50,000 backlog asks for 13 of
		// them, the plan's count; the 50 % margin needs 19.
		{"notes", Inputs{Rate: 5000, Wait: 10, Exec: 0.5, Slots: 200}, Autoscaling{4000, 200, 10, 0, 19}},
		{"no-op tasks", Inputs{Rate: 100, Wait: 0.5, Exec: 0, Slots: 16}, Autoscaling{8000, 16, 0.5, 0, 1}},
		{"idle", Inputs{Rate: 0, Wait: 0, Exec: 2, Slots: 16}, Autoscaling{1, 16, 0, 0, 1}},
	} {
		p, err := Make(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := p.Autoscaling(); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
		// The planned backlog asks for the planned executors.
		if p.Exec > 0 && p.Backlog > 0 {
			if n := ceil(p.Backlog / p.Autoscaling().BacklogPerReplica); n != p.Executors {
				t.Errorf("%s: backlog %v / %v per replica = %d executors, plan says %d", tc.name, p.Backlog, p.Autoscaling().BacklogPerReplica, n, p.Executors)
			}
		}
	}
}
