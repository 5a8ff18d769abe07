package cronspec

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/task"
)

// taskIDPattern is the pattern behind task.ValidID.
var taskIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_\-=/]{0,127}$`)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func mustParse(t *testing.T, expr, tz string) *Schedule {
	t.Helper()
	s, err := Parse(expr, tz)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", expr, tz, err)
	}
	return s
}

// fires returns the first n fire times after from.
func fires(s *Schedule, from time.Time, n int) []string {
	var out []string
	for t := from; len(out) < n; {
		t = s.Next(t)
		out = append(out, t.Format(time.RFC3339Nano))
	}
	return out
}

func TestNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, expr, tz string
		from           string
		want           []string
	}{
		{"5-field", "30 2 * * *", "", "2026-11-28T12:00:00Z",
			[]string{"2026-11-29T02:30:00Z", "2026-11-30T02:30:00Z"}},
		{"5-field strictly after", "30 2 * * *", "", "2026-11-29T02:30:00Z",
			[]string{"2026-11-30T02:30:00Z"}},
		{"5-field step and weekday names", "*/20 9-10 * * mon-fri", "", "2026-11-27T10:50:00Z", // a Friday
			[]string{"2026-11-30T09:00:00Z", "2026-11-30T09:20:00Z", "2026-11-30T09:40:00Z", "2026-11-30T10:00:00Z"}},
		{"6-field with seconds", "15,45 * * * * *", "", "2026-01-01T00:00:00.5Z",
			[]string{"2026-01-01T00:00:15Z", "2026-01-01T00:00:45Z", "2026-01-01T00:01:15Z"}},
		{"dom or dow", "0 0 1 * sun", "", "2026-02-25T00:00:00Z", // Mar 1 2026 is a Sunday
			[]string{"2026-03-01T00:00:00Z", "2026-03-08T00:00:00Z", "2026-03-15T00:00:00Z"}},
		{"zone", "0 9 * * *", "America/New_York", "2026-07-01T00:00:00Z",
			[]string{"2026-07-01T13:00:00Z", "2026-07-02T13:00:00Z"}},
		{"@yearly", "@yearly", "", "2026-05-05T00:00:00Z", []string{"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"}},
		{"@annually", "@annually", "", "2026-05-05T00:00:00Z", []string{"2027-01-01T00:00:00Z"}},
		{"@monthly", "@monthly", "", "2026-05-05T00:00:00Z", []string{"2026-06-01T00:00:00Z", "2026-07-01T00:00:00Z"}},
		{"@weekly", "@weekly", "", "2026-05-05T00:00:00Z", []string{"2026-05-10T00:00:00Z", "2026-05-17T00:00:00Z"}}, // Sundays
		{"@daily", "@daily", "", "2026-05-05T00:00:00Z", []string{"2026-05-06T00:00:00Z"}},
		{"@midnight in zone", "@midnight", "Asia/Tokyo", "2026-05-05T00:00:00Z", []string{"2026-05-05T15:00:00Z", "2026-05-06T15:00:00Z"}},
		{"@hourly", "@hourly", "", "2026-05-05T10:59:59.999Z", []string{"2026-05-05T11:00:00Z", "2026-05-05T12:00:00Z"}},
		{"@every 1m aligned", "@every 1m", "", "2026-05-05T10:00:30.25Z",
			[]string{"2026-05-05T10:01:00Z", "2026-05-05T10:02:00Z"}},
		{"@every on a multiple", "@every 1m", "UTC", "2026-05-05T10:00:00Z", []string{"2026-05-05T10:01:00Z"}},
		{"@every 7h counts from the Unix epoch", "@every 7h", "", "2026-05-05T00:00:00Z",
			// 2026-05-05T00:00Z is 493,872 h after the epoch; 493,878 = 7·70,554.
			[]string{"2026-05-05T06:00:00Z", "2026-05-05T13:00:00Z"}},
		{"@every 1500ms", "@every 1500ms", "", "1970-01-01T00:00:00Z",
			[]string{"1970-01-01T00:00:01.5Z", "1970-01-01T00:00:03Z", "1970-01-01T00:00:04.5Z"}},
		{"@every before the epoch", "@every 1h", "", "1969-12-31T22:30:00Z", []string{"1969-12-31T23:00:00Z", "1970-01-01T00:00:00Z"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := mustParse(t, tc.expr, tc.tz)
			got := fires(s, utc(tc.from), len(tc.want))
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("Next from %s:\n got %v\nwant %v", tc.from, got, tc.want)
			}
		})
	}
}

func TestNextReturnsUTC(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, expr := range []string{"0 2 * * *", "*/5 * * * *", "@every 1m"} {
		tz := "Europe/Berlin"
		if strings.HasPrefix(expr, "@every") {
			tz = ""
		}
		n := mustParse(t, expr, tz).Next(time.Date(2026, 6, 1, 12, 0, 0, 0, berlin))
		if n.Location() != time.UTC {
			t.Errorf("%s: Next in %v, want UTC", expr, n.Location())
		}
	}
}

// TestEveryAgreesWithEpochArithmetic checks the alignment rule directly: the
// next firing is the next multiple of the interval in Unix nanoseconds.
func TestEveryAgreesWithEpochArithmetic(t *testing.T) {
	t.Parallel()
	for _, d := range []string{"1s", "1500ms", "7s", "1m", "13m", "7h", "25h", "168h"} {
		s := mustParse(t, "@every "+d, "")
		iv := s.every.Nanoseconds()
		for _, from := range []string{"2026-03-29T01:59:59.999999999Z", "2026-10-25T00:00:00Z", "2038-01-19T03:14:07Z", "1999-12-31T23:59:59.5Z"} {
			f := utc(from)
			want := time.Unix(0, (f.UnixNano()/iv+1)*iv).UTC()
			if got := s.Next(f); !got.Equal(want) {
				t.Errorf("@every %s from %s: got %s, want %s", d, from, got, want)
			}
		}
	}
}

// Europe/Berlin: 2026-03-29 clocks go 02:00 CET → 03:00 CEST (02:xx does not
// exist); 2026-10-25 they go 03:00 CEST → 02:00 CET (02:xx happens twice).
func TestNextAcrossDST(t *testing.T) {
	t.Parallel()
	const tz = "Europe/Berlin"
	tests := []struct {
		name, expr, from string
		want             []string
	}{
		{"fixed time in the gap fires at the gap's end", "30 2 * * *", "2026-03-28T12:00:00Z",
			// 03:00 CEST on the 29th, then 02:30 CEST.
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"several skipped wall times collapse into one firing", "0,15,30,45 2 * * *", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z"}},
		{"fixed time before the gap is unaffected", "30 1 * * *", "2026-03-28T12:00:00Z",
			// 01:30 CET, then 01:30 CEST.
			[]string{"2026-03-29T00:30:00Z", "2026-03-29T23:30:00Z"}},
		{"fixed time in the repeated hour fires once, at its first occurrence", "30 2 * * *", "2026-10-24T12:00:00Z",
			// 02:30 CEST on the 25th, then 02:30 CET.
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"from the second pass, the repeated wall time is not fired again", "30 2 * * *", "2026-10-25T01:10:00Z", // 02:10 CET
			[]string{"2026-10-26T01:30:00Z"}},
		{"fixed time after the repeated hour", "0 3 * * *", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T02:00:00Z", "2026-10-26T02:00:00Z"}},
		{"every-hour schedule skips wall times in the gap", "7 * * * *", "2026-03-29T00:00:00Z", // 01:00 CET
			[]string{"2026-03-29T00:07:00Z", "2026-03-29T01:07:00Z", "2026-03-29T02:07:00Z"}},
		{"every-hour schedule keeps elapsed cadence over the gap", "*/30 * * * *", "2026-03-29T00:00:00Z",
			[]string{"2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z"}},
		{"every-hour schedule fires in both passes of the repeated hour", "*/30 * * * *", "2026-10-24T23:45:00Z", // 01:45 CEST
			// 02:00 CEST, 02:30 CEST, 02:00 CET, 02:30 CET, 03:00 CET.
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z", "2026-10-25T02:00:00Z"}},
		{"@hourly over the repeated hour", "@hourly", "2026-10-24T23:30:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"}},
		{"@daily over both transitions", "@daily", "2026-03-28T12:00:00Z",
			[]string{"2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := mustParse(t, tc.expr, tz)
			got := fires(s, utc(tc.from), len(tc.want))
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("%s from %s:\n got %v\nwant %v", tc.expr, tc.from, got, tc.want)
			}
		})
	}
}

// Over a whole year in Europe/Berlin, a fixed-time schedule fires once a day,
// while every-hour schedules lose the skipped hour's firings in March and gain
// the repeated hour's in October.
func TestYearAcrossDST(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		want int
	}{
		{"30 2 * * *", 365},
		{"0 0 * * *", 365},
		{"@hourly", 365*24 - 1 + 1},
		{"*/30 * * * *", 365*48 - 2 + 2},
		{"0 30 * * * *", 365*24 - 1 + 1},
	}
	from, to := utc("2025-12-31T23:00:00Z"), utc("2026-12-31T23:00:00Z") // one Berlin year
	for _, tc := range tests {
		s := mustParse(t, tc.expr, "Europe/Berlin")
		times, truncated := s.Missed(from, to, 100000)
		if len(times) != tc.want || truncated {
			t.Errorf("%s: %d firings in 2026 (truncated %v), want %d", tc.expr, len(times), truncated, tc.want)
		}
		for i := 1; i < len(times); i++ {
			if !times[i].After(times[i-1]) {
				t.Fatalf("%s: firings out of order: %s then %s", tc.expr, times[i-1], times[i])
			}
		}
	}
}

// In America/Sao_Paulo, 2018-11-04 started at 01:00: midnight did not exist.
func TestNextMidnightInGap(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "@daily", "America/Sao_Paulo")
	got := fires(s, utc("2018-11-03T12:00:00Z"), 2)
	want := []string{"2018-11-04T03:00:00Z", "2018-11-05T02:00:00Z"} // 01:00 -02, then 00:00 -02
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr, tz string
		want     string // the whole message, or a prefix ending in "…"
	}{
		{"61 * * * *", "", `cron "61 * * * *": minute: end of range (61) above maximum (59)`},
		{"0 61 * * * *", "", `cron "0 61 * * * *": minute: end of range (61) above maximum (59)`},
		{"60 0 * * * *", "", `cron "60 0 * * * *": second: end of range (60) above maximum (59)`},
		{"0 24 * * *", "", `cron "0 24 * * *": hour: end of range (24) above maximum (23)`},
		{"0 0 0 * *", "", `cron "0 0 0 * *": day of month: beginning of range (0) below minimum (1)`},
		{"0 0 * 13 *", "", `cron "0 0 * 13 *": month: end of range (13) above maximum (12)`},
		{"0 0 * * 7", "", `cron "0 0 * * 7": day of week: end of range (7) above maximum (6)`},
		{"0 0 * * 1,9", "", `cron "0 0 * * 1,9": day of week: end of range (9) above maximum (6): 9`},
		{"5-1 * * * *", "", `cron "5-1 * * * *": minute: beginning of range (5) beyond end of range (1)`},
		{"x * * * *", "", `cron "x * * * *": minute: failed to parse int from x…`},
		{"* * * *", "", `cron "* * * *": expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with leading seconds), found 4`},
		{"* * * * * * *", "", `cron "* * * * * * *": expected 5 fields … found 7`},
		{"", "", `cron "": empty expression`},
		{"   ", "", `cron "   ": empty expression`},
		{"@fortnightly", "", `cron "@fortnightly": unknown descriptor @fortnightly…`},
		{"@daily 5", "", `cron "@daily 5": descriptor @daily takes no fields`},
		{"0 0 30 2 *", "", `cron "0 0 30 2 *": never fires (no date matches the day and month fields)`},
		{"CRON_TZ=UTC 0 0 * * *", "", `cron "CRON_TZ=UTC 0 0 * * *": a zone prefix is not allowed…`},
		{"@every", "", `cron "@every": want "@every <duration>"…`},
		{"@every 5 m", "", `cron "@every 5 m": want "@every <duration>"…`},
		{"@every soon", "", `cron "@every soon": time: invalid duration "soon"`},
		{"@every 500ms", "", `cron "@every 500ms": interval 500ms is below the minimum of 1s`},
		{"@every -1m", "", `cron "@every -1m": interval -1m0s is below the minimum of 1s`},
		{"@every 1m", "Europe/Berlin", `cron "@every 1m": time zone "Europe/Berlin" given, but @every intervals are zone-independent…`},
		{"0 0 * * *", "Mars/Base", `time zone "Mars/Base": unknown time zone Mars/Base`},
		{"0 0 * * *", "Local", `time zone "Local": the host's local zone is not allowed…`},
		{"@daily", "europe/nowhere", `time zone "europe/nowhere": unknown time zone europe/nowhere`},
	}
	for _, tc := range tests {
		t.Run(tc.expr+"|"+tc.tz, func(t *testing.T) {
			t.Parallel()
			s, err := Parse(tc.expr, tc.tz)
			if err == nil {
				t.Fatalf("Parse(%q, %q) = %v, want an error", tc.expr, tc.tz, s)
			}
			if !matches(err.Error(), tc.want) {
				t.Errorf("Parse(%q, %q):\n got %s\nwant %s", tc.expr, tc.tz, err, tc.want)
			}
		})
	}
}

// matches compares got with want, where "…" in want stands for any text.
func matches(got, want string) bool {
	parts := strings.Split(want, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`^` + strings.Join(parts, `.*`) + `$`).MatchString(got)
}

func TestParseAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ expr, tz string }{
		{"0 0 29 2 *", ""}, // leap days only
		{"  0   0  * * *  ", "UTC"},
		{"0 0 ? * *", ""},
		{"0 0 1 jan,jul *", "Australia/Lord_Howe"},
		{"@every 1s", ""},
		{"@every 1h30m", "UTC"},
	} {
		if _, err := Parse(tc.expr, tc.tz); err != nil {
			t.Errorf("Parse(%q, %q): %v", tc.expr, tc.tz, err)
		}
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	tests := []struct{ expr, tz, want string }{
		{"0 2 * * *", "", "0 2 * * *"},
		{"0 2 * * *", "Europe/Berlin", "0 2 * * * (Europe/Berlin)"},
		{"@every 90s", "UTC", "@every 90s (UTC)"},
	}
	for _, tc := range tests {
		if got := mustParse(t, tc.expr, tc.tz).String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestMissed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, expr, tz string
		from, to       string
		max            int
		want           []string
		truncated      bool
	}{
		{"all within the cap", "0 * * * *", "", "2026-05-05T10:00:00Z", "2026-05-05T13:00:00Z", 10,
			[]string{"2026-05-05T11:00:00Z", "2026-05-05T12:00:00Z", "2026-05-05T13:00:00Z"}, false},
		{"from is exclusive, to inclusive", "0 * * * *", "", "2026-05-05T10:00:00Z", "2026-05-05T10:59:59Z", 10,
			nil, false},
		{"capped, oldest first", "@every 1m", "", "2026-05-05T10:00:00Z", "2026-05-05T12:00:00Z", 3,
			[]string{"2026-05-05T10:01:00Z", "2026-05-05T10:02:00Z", "2026-05-05T10:03:00Z"}, true},
		{"exactly the cap is not truncated", "0 * * * *", "", "2026-05-05T10:00:00Z", "2026-05-05T13:00:00Z", 3,
			[]string{"2026-05-05T11:00:00Z", "2026-05-05T12:00:00Z", "2026-05-05T13:00:00Z"}, false},
		{"max 0 only reports", "0 * * * *", "", "2026-05-05T10:00:00Z", "2026-05-05T13:00:00Z", 0, nil, true},
		{"empty range", "0 * * * *", "", "2026-05-05T10:00:00Z", "2026-05-05T09:00:00Z", 5, nil, false},
		{"repeated hour counted once", "30 2 * * *", "Europe/Berlin", "2026-10-24T00:00:00Z", "2026-10-27T00:00:00Z", 10,
			[]string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := mustParse(t, tc.expr, tc.tz)
			times, truncated := s.Missed(utc(tc.from), utc(tc.to), tc.max)
			var got []string
			for _, tm := range times {
				got = append(got, tm.Format(time.RFC3339))
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") || truncated != tc.truncated {
				t.Errorf("Missed = %v, %v; want %v, %v", got, truncated, tc.want, tc.truncated)
			}
		})
	}
}

func TestFireID(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("n", 64)
	tests := []struct {
		name string
		fire time.Time
		want string // "" to only check validity and determinism
	}{
		{"nightly", utc("2026-11-29T02:00:00Z"), "nightly-20261129T020000Z"},
		{"nightly", time.Date(2026, 11, 29, 3, 0, 0, 0, time.FixedZone("CET", 3600)), "nightly-20261129T020000Z"},
		{"tick", utc("2026-11-29T02:00:01.5Z"), "tick-20261129T020001_500Z"},
		{"tick", utc("2026-11-29T02:00:01.000250Z"), "tick-20261129T020001_000250Z"},
		{"tick", utc("2026-11-29T02:00:01.000000007Z"), "tick-20261129T020001_000000007Z"},
		{long, utc("2026-11-29T02:00:00Z"), long + "-20261129T020000Z"},
		{strings.Repeat("x", 200), utc("2026-11-29T02:00:00Z"), ""},
		{"has.dots and spaces", utc("2026-11-29T02:00:00Z"), ""},
		{"-leading", utc("2026-11-29T02:00:00Z"), ""},
		{"", utc("2026-11-29T02:00:00Z"), ""},
		{"..", utc("2026-11-29T02:00:00.123456789Z"), ""},
	}
	seen := map[string]string{}
	for _, tc := range tests {
		id := FireID(tc.name, tc.fire)
		if tc.want != "" && id != tc.want {
			t.Errorf("FireID(%q, %s) = %q, want %q", tc.name, tc.fire, id, tc.want)
		}
		if !taskIDPattern.MatchString(id) || !task.ValidID(id) {
			t.Errorf("FireID(%q, %s) = %q, not a valid task id", tc.name, tc.fire, id)
		}
		if again := FireID(tc.name, tc.fire); again != id {
			t.Errorf("FireID(%q) not deterministic: %q then %q", tc.name, id, again)
		}
		key := tc.name + "|" + tc.fire.UTC().String()
		if prev, ok := seen[id]; ok && prev != key {
			t.Errorf("FireID collision: %q for %s and %s", id, prev, key)
		}
		seen[id] = key
	}
	// Names that must be shortened still differ by name and by time.
	a, b := strings.Repeat("a", 120)+"1", strings.Repeat("a", 120)+"2"
	f := utc("2026-11-29T02:00:00Z")
	if FireID(a, f) == FireID(b, f) {
		t.Errorf("long names %q and %q share an id", a, b)
	}
	if FireID(a, f) == FireID(a, f.Add(time.Second)) {
		t.Errorf("one long name, two times, one id")
	}
	if id := FireID(a, f); !strings.HasPrefix(id, "aaaa") || !strings.HasSuffix(id, "-20261129T020000Z") || len(id) > 128 {
		t.Errorf("shortened id %q: want the name's start, the time, at most 128 characters", id)
	}
}

// Ids of one schedule sort by fire time.
func TestFireIDsSort(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "@every 1500ms", "")
	prev := ""
	for _, ft := range fires(s, utc("2026-11-29T02:00:00Z"), 20) {
		id := FireID("tick", utc(ft))
		if id <= prev {
			t.Errorf("id %q sorts before %q", id, prev)
		}
		prev = id
	}
}

func TestValidName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		want bool
	}{
		{"nightly", true},
		{"a", true},
		{"9-lives_x", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{"-x", false},
		{"_x", false},
		{"a.b", false},
		{"a/b", false},
		{"a=b", false},
		{"a b", false},
		{"ünï", false},
	}
	for _, tc := range tests {
		if got := ValidName(tc.name); got != tc.want {
			t.Errorf("ValidName(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
