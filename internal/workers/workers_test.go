package workers

import (
	"strings"
	"testing"

	"github.com/ax-run/ax/task"
)

func TestUnserved(t *testing.T) {
	mail := task.Worker{ID: "mail", Capabilities: []string{"default"}, Types: []string{"email.bounce", "email.send"}}
	gpu := task.Worker{ID: "gpu-1", Capabilities: []string{"gpu", "default"}, Types: []string{"video.encode"}}
	for _, tc := range []struct {
		ws              []task.Worker
		capability, typ string
		want            string // "" or a part of the answer
	}{
		{[]task.Worker{mail}, "default", "email.send", ""},
		{[]task.Worker{mail, gpu}, "default", "video.encode", ""}, // gpu-1 serves default too
		{[]task.Worker{mail}, "default", "pdf.render", `no executor handles type "pdf.render" on capability "default": the 1 running there (mail)`},
		{[]task.Worker{mail, gpu}, "default", "pdf.render", "the 2 running there (mail, gpu-1)"},
		{[]task.Worker{mail}, "gpu", "video.encode", `no executor serving capability "gpu" is running`},
		{nil, "default", "email.send", `no executor serving capability "default"`},
	} {
		got := Unserved(tc.ws, tc.capability, tc.typ)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("Unserved(%s, %s) = %q; want %q", tc.capability, tc.typ, got, tc.want)
		}
	}
	var many []task.Worker
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		many = append(many, task.Worker{ID: id, Capabilities: []string{"default"}})
	}
	if got := Unserved(many, "default", "x"); !strings.Contains(got, "the 7 running there (a, b, c, d, e and 2 more)") {
		t.Errorf("many executors: %q", got)
	}
}

func TestRunning(t *testing.T) {
	ws := []task.Worker{
		{ID: "a", Running: []task.WorkerExecution{{TaskID: "t1", ExecutionID: "old"}}},
		{ID: "b", Running: []task.WorkerExecution{{TaskID: "t2", ExecutionID: "x"}, {TaskID: "t1", ExecutionID: "new"}}},
	}
	if id, x, ok := Running(ws, "t1", "new"); !ok || id != "b" || x.ExecutionID != "new" {
		t.Errorf("t1/new: %q %+v %v; want on b", id, x, ok)
	}
	if _, _, ok := Running(ws, "t1", "gone"); ok {
		t.Error("an execution nobody runs found running")
	}
}
