package subject

import "testing"

func TestReplyToAllowed(t *testing.T) {
	for subj, want := range map[string]bool{
		"_INBOX.abc":                 true,
		"_INBOX.producer.abc.def":    true,
		"_INBOX_custom.x":            true,
		"":                           false,
		"ax.task.victim":             false,
		"task.completed.email.send":  false,
		"$JS.API.STREAM.DELETE.X":    false,
		"_INBOX.>":                   false,
		"_INBOX.*.x":                 false,
		"_INBOX..x":                  false,
		"_INBOX.x.":                  false,
		"_INBOX.a b":                 false,
		"x._INBOX.a":                 false,
		TaskEvents("_INBOX"):         false,
		"_INBOX.producer.x\r\nPUB y": false,
	} {
		if got := ReplyToAllowed(subj); got != want {
			t.Errorf("ReplyToAllowed(%q) = %v, want %v", subj, got, want)
		}
	}
}
