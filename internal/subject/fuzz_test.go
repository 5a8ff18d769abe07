package subject_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// FuzzParse feeds arbitrary subjects and keys to the parsers that read
// them off the wire (a submission's type, a ready level, a command, a pause
// scope, a control key, an edge): none panics, and what one accepts is what
// the matching builder makes.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"task.submit.email.send", "task.submit-p3.report.build", "task.submit-p9.x", "task.submit.",
		"task.ready.gpu.p0", "task.ready.gpu.p+5", "task.ready.gpu.p6", "task.ready..p1",
		"ax.cmd.cancel.a1", "ax.cmd.pause.type=email.send", "ax.cmd.pause.all", "ax.cmd.cancel.", "ax.cmd.",
		"pause.all", "pause.type.email.send", "breaker.t", "ax.edge.up.child", "ax.task.a/shard/3", "",
	} {
		f.Add(s, "up")
	}
	f.Fuzz(func(t *testing.T, s, up string) {
		if typ, ok := subject.TypeFromSubmit(s); ok {
			if typ == "" {
				t.Fatalf("TypeFromSubmit(%q) accepted an empty type", s)
			}
			match := subject.Submit(typ) == s
			for p := range subject.Priorities {
				match = match || subject.SubmitLane(p, typ) == s
			}
			if !match {
				t.Fatalf("TypeFromSubmit(%q) = %q, which no submit subject builds", s, typ)
			}
		}
		if n, ok := subject.ReadyLevel(s); ok && (n < 0 || n >= subject.Priorities) {
			t.Fatalf("ReadyLevel(%q) = %d", s, n)
		}
		if caller, kind, id, ok := subject.ParseCommand(s); ok {
			back := subject.Command(kind, id)
			if caller != "" {
				back = subject.CommandAs(caller, kind, id)
			}
			if id == "" || strings.Contains(kind, ".") || back != s {
				t.Fatalf("ParseCommand(%q) = %q, %q, %q", s, caller, kind, id)
			}
		}
		if typ, ok := subject.ParsePauseScope(s); ok && subject.PauseScope(typ) != s {
			t.Fatalf("ParsePauseScope(%q) = %q", s, typ)
		}
		if kind, typ, ok := subject.ParseControlKey(s); ok {
			var key string
			switch {
			case kind == "pause" && typ == "":
				key = subject.ControlPauseAll
			case kind == "pause":
				key = subject.ControlPauseType(typ)
			case kind == "breaker":
				key = subject.ControlBreaker(typ)
			}
			// "pause.type." reads as pause-all; KV keys cannot end in ".",
			// so no stored key is ever that.
			if key != s && !(kind == "pause" && typ == "" && s == subject.ControlPauseType("")) {
				t.Fatalf("ParseControlKey(%q) = %q, %q", s, kind, typ)
			}
		}
		if child, ok := subject.EdgeChild(s, up); ok && subject.Edge(up, child) != s {
			t.Fatalf("EdgeChild(%q, %q) = %q", s, up, child)
		}
		// Names built from valid parts parse back to those parts.
		if task.ValidType(s) {
			for p := range subject.Priorities {
				if got, ok := subject.TypeFromSubmit(subject.SubmitLane(p, s)); !ok || got != s {
					t.Fatalf("lane %d: TypeFromSubmit(SubmitLane(%q)) = %q, %v", p, s, got, ok)
				}
			}
			if got, ok := subject.ParsePauseScope(subject.PauseScope(s)); !ok || got != s {
				t.Fatalf("ParsePauseScope(PauseScope(%q)) = %q, %v", s, got, ok)
			}
		}
		if task.ValidCapability(s) {
			for p := range subject.Priorities {
				if got, ok := subject.ReadyLevel(subject.Ready(s, p)); !ok || got != p {
					t.Fatalf("ReadyLevel(Ready(%q, %d)) = %d, %v", s, p, got, ok)
				}
			}
		}
		if task.ValidID(s) {
			if subject.TaskID(subject.TaskEvents(s)) != s {
				t.Fatalf("TaskID(TaskEvents(%q)) = %q", s, subject.TaskID(subject.TaskEvents(s)))
			}
			if _, kind, id, ok := subject.ParseCommand(subject.Command(subject.CommandCancel, s)); !ok || kind != subject.CommandCancel || id != s {
				t.Fatalf("ParseCommand(Command(cancel, %q)) = %q, %q, %v", s, kind, id, ok)
			}
		}
	})
}

// FuzzCommand decodes an operator command as the orchestrator does
// (orchestrator/command.go): its subject, its body, and for a pause its
// scope. What it accepts names a valid task, or a valid type or all.
func FuzzCommand(f *testing.F) {
	for _, c := range []struct{ subj, body string }{
		{"ax.cmd.cancel.a1", `{"reason":"no longer needed"}`},
		{"ax.cmd.redrive.a1", ``},
		{"ax.cmd.pause.type=email.send", `{"reason":"incident","retries_only":true}`},
		{"ax.cmd.resume.all", `{}`},
		{"ax.cmd.pause.type=", `{"retries_only":"yes"}`},
		{"ax.cmd.schedule-create.nightly", `{"cron":"0 2 * * *","template":{"type":"t"}}`},
		{"ax.cmd.cancel.a1", `[1,2]`},
		{"ax.cmd.as.alice.cancel.a1", `{"by":"console:bob"}`},
	} {
		f.Add(c.subj, []byte(c.body))
	}
	f.Fuzz(func(t *testing.T, subj string, body []byte) {
		caller, kind, id, ok := subject.ParseCommand(subj)
		if !ok {
			return
		}
		if caller != "" && !subject.ValidCaller(caller) {
			t.Fatalf("ParseCommand(%q) accepted the caller %q", subj, caller)
		}
		var req task.CommandRequest
		if len(body) > 0 && kind != subject.CommandScheduleCreate && json.Unmarshal(body, &req) != nil {
			return // answered "malformed command"
		}
		switch kind {
		case subject.CommandPause, subject.CommandResume:
			typ, ok := subject.ParsePauseScope(id)
			if ok && typ != "" && task.ValidType(typ) && subject.ControlPauseType(typ) != "pause.type."+typ {
				t.Fatalf("pause key of %q", typ)
			}
			if ok && typ == "" && id != "all" {
				t.Fatalf("scope %q read as all types", id)
			}
		case subject.CommandCancel, subject.CommandRedrive:
			back := subject.Command(kind, id)
			if caller != "" {
				back = subject.CommandAs(caller, kind, id)
			}
			if back != subj {
				t.Fatalf("command %q does not rebuild", subj)
			}
		}
	})
}
