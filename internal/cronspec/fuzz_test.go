package cronspec_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/cronspec"
	"github.com/ax-run/ax/task"
)

// FuzzParse feeds schedule expressions and zones as a producer may send them
// (ax.cmd.schedule-create): Parse must not panic, and an accepted schedule
// fires strictly later than asked, in bounded catch-up lists, under ids that
// are valid task ids.
func FuzzParse(f *testing.F) {
	for _, s := range []struct{ expr, tz string }{
		{"0 2 * * *", "Europe/Berlin"}, {"30 2 * * *", "America/New_York"}, {"*/15 * * * *", ""},
		{"0 0 0 29 2 *", "UTC"}, {"0 0 30 2 *", ""}, {"@daily", "Asia/Kolkata"}, {"@every 1500ms", ""},
		{"@every 0s", ""}, {"@every 5m", "Europe/Berlin"}, {"CRON_TZ=UTC 0 * * * *", ""},
		{"61 * * * *", ""}, {"0 9 * jan-mar mon-fri", "Australia/Lord_Howe"}, {"* * * * * * *", ""},
		{"@hourly", "Local"}, {"0 0 * * *", "../../etc/passwd"},
	} {
		f.Add(s.expr, s.tz, int64(1795000000), "nightly")
	}
	f.Fuzz(func(t *testing.T, expr, tz string, unix int64, name string) {
		s, err := cronspec.Parse(expr, tz)
		if err != nil {
			if s != nil {
				t.Fatalf("Parse returned a schedule and an error")
			}
			return
		}
		// Instants between 1970 and about 2200.
		at := time.Unix(0, 0).Add(time.Duration(uint64(unix)%(230*365*24*3600)) * time.Second)
		n := s.Next(at)
		if n.IsZero() {
			return
		}
		if !n.After(at) {
			t.Fatalf("%q (%s): Next(%s) = %s, not after", expr, tz, at, n)
		}
		const max = 5
		times, _ := s.Missed(at, n.Add(24*time.Hour), max)
		if len(times) > max {
			t.Fatalf("Missed returned %d times, max %d", len(times), max)
		}
		for i := 1; i < len(times); i++ {
			if !times[i].After(times[i-1]) {
				t.Fatalf("Missed is not increasing: %v", times)
			}
		}
		if id := cronspec.FireID(name, n); !task.ValidID(id) || strings.Contains(id, task.ShardSeparator) {
			t.Fatalf("FireID(%q, %s) = %q is not a valid task id", name, n, id)
		}
	})
}
