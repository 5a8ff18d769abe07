package subject

import (
	"os"
	"strings"
	"testing"
)

// TestContractDocumentsEveryName keeps subjects.md in step with this package.
func TestContractDocumentsEveryName(t *testing.T) {
	doc, err := os.ReadFile("../../subjects.md")
	if err != nil {
		t.Fatalf("read subjects.md: %v", err)
	}
	names := []string{
		StreamSubmit, StreamCompleted, StreamTasks, StreamTimers, StreamCommands, StreamDLQ, StreamRejected,
		ConsumerSubmit, ConsumerCompleted, ConsumerTimers, ConsumerLooks, ConsumerCommands, ConsumerMirror,
		HeaderMsgID, HeaderReplyTo, HeaderSchedule, HeaderScheduleTarget,
		SubmitAll, GraphSubmit, CompletedAll, TaskAll, TimerAll, FireAll, CommandAll, DLQAll, RejectedAll,
		Submit("<type>"), Completed("<type>"),
		TaskEvents("<id>"), "ax.task.<id>.d.<capability>.p<N>.<type>", TaskHistory("<id>"), HeaderToken, BellAll, Inputs("<capability>"), Timer("<kind>", "<id>"), Fire("<kind>", "<id>"), Command("<kind>", "<id>"), DLQ("<id>"),
		Rejected("<id>", ""), Rejected("", "<unique>"), BucketRevoked, RevokedKey("<capability>", "<id>"),
		"ax-ready-<capability>-p<N>", string(TimerRetry), CommandCancel, CommandRedrive,
		StreamHeld, StreamAudit, HeldAll, AuditAll, BucketSchedules, BucketControl, BucketRetryWindows,
		ControlPauseAll, "pause.type.<type>", "breaker.<type>", "ax.held.<type>.<id>", "ax.audit.<kind>.<key>",
		string(TimerStart), string(TimerDeadline), string(TimerDispatch), string(TimerSchedule),
		StreamTypes, TaskTypeAll, TaskType("<type>"), BucketObjects, ObjectBucket("<capability>"),
		CommandPause, CommandResume, CommandScheduleCreate, CommandSchedulePause, CommandScheduleResume, CommandScheduleDelete,
		State("<id>", "<type>"),
		BucketWorkers, "$KV.AX_WORKERS.<key>", "<capability>.<executor id>", CommandDLQDelete, CommandApprove, CommandReject,
	}
	for _, k := range TimerKinds {
		names = append(names, "| `"+string(k)+"` |")
	}
	for _, n := range names {
		if !strings.Contains(string(doc), n) {
			t.Errorf("subjects.md does not mention %q", n)
		}
	}
}

func TestNames(t *testing.T) {
	if got := Ready("gpu", 3); got != "task.ready.gpu.p3" {
		t.Errorf("Ready = %q", got)
	}
	if lvl, ok := ReadyLevel("task.ready.gpu.p3"); !ok || lvl != 3 {
		t.Errorf("ReadyLevel = %d %v", lvl, ok)
	}
	for _, bad := range []string{"task.ready.gpu", "task.ready.gpu.p9", "task.ready.gpu.px", "other.p1"} {
		if _, ok := ReadyLevel(bad); ok {
			t.Errorf("ReadyLevel(%q) accepted", bad)
		}
	}
	if typ, ok := TypeFromSubmit("task.submit.email.send"); !ok || typ != "email.send" {
		t.Errorf("TypeFromSubmit = %q %v", typ, ok)
	}
	if typ, ok := TaskTypeFrom(TaskType("email.send")); !ok || typ != "email.send" {
		t.Errorf("TaskTypeFrom = %q %v", typ, ok)
	}
	if _, ok := TaskTypeFrom("ax.type."); ok {
		t.Error("TaskTypeFrom accepted an empty type")
	}
	if b := ObjectBucket("pdf-x_1"); b != "AX_OBJECTS_pdf-x_1" {
		t.Errorf("ObjectBucket = %q", b)
	}
	if c, ok := ObjectBucketCapability(ObjectBucket("pdf")); !ok || c != "pdf" {
		t.Errorf("ObjectBucketCapability = %q %v", c, ok)
	}
	for _, bad := range []string{BucketObjects, BucketObjects + "_", "AX_OBJECTSX", "KV_AX_OBJECTS_pdf"} {
		if _, ok := ObjectBucketCapability(bad); ok {
			t.Errorf("ObjectBucketCapability(%q) accepted", bad)
		}
	}
	if caller, kind, id, ok := ParseCommand("ax.cmd.cancel.a/b"); !ok || caller != "" || kind != "cancel" || id != "a/b" {
		t.Errorf("ParseCommand = %q %q %q %v", caller, kind, id, ok)
	}
	if _, _, _, ok := ParseCommand("ax.cmd.cancel"); ok {
		t.Error("ParseCommand accepted a subject without id")
	}
	if caller, kind, id, ok := ParseCommand(CommandAs("alice", "cancel", "a.b")); !ok || caller != "alice" || kind != "cancel" || id != "a.b" {
		t.Errorf("ParseCommand(CommandAs) = %q %q %q %v", caller, kind, id, ok)
	}
	for _, bad := range []string{"ax.cmd.as.alice.cancel", "ax.cmd.as.alice", "ax.cmd.as..cancel.x"} {
		if _, _, _, ok := ParseCommand(bad); ok {
			t.Errorf("ParseCommand accepted %q", bad)
		}
	}
	for name, want := range map[string]bool{"alice": true, "console": true, "": false, "a.b": false, "*": false, "a b": false} {
		if ValidCaller(name) != want {
			t.Errorf("ValidCaller(%q) = %v", name, !want)
		}
	}
}
