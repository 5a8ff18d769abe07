package cli

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ax-run/ax/task"
)

// dlqRetentionFlag is --dlq-retention TYPE=DURATION, repeatable: the
// retention of one task type's dead letters (orchestrator.Config.
// DeadLetterRetention).
type dlqRetentionFlag struct{ m *map[string]time.Duration }

func (f dlqRetentionFlag) String() string {
	if f.m == nil || *f.m == nil {
		return ""
	}
	var parts []string
	for t, d := range *f.m {
		parts = append(parts, t+"="+d.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (f dlqRetentionFlag) Set(v string) error {
	typ, dur, ok := strings.Cut(v, "=")
	if !ok || !task.ValidType(typ) {
		return fmt.Errorf("want TYPE=DURATION (e.g. email.send=72h), got %q", v)
	}
	d, err := time.ParseDuration(dur)
	if err != nil || d < time.Second {
		return fmt.Errorf("%s: want a duration of at least 1s, got %q", typ, dur)
	}
	if *f.m == nil {
		*f.m = map[string]time.Duration{}
	}
	(*f.m)[typ] = d
	return nil
}

func (dlqRetentionFlag) Type() string { return "TYPE=DURATION" }
