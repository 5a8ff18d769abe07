// Package cronspec parses recurring schedule expressions — 5- or 6-field cron
// expressions, descriptors such as @daily, and "@every <duration>" intervals —
// and computes their fire times.
//
// Fire times are a pure function of the expression, the zone and the instant
// asked about, so every orchestrator that evaluates the same schedule agrees
// on when it fires and, through FireID, on the id of each firing.
//
// # Time zones and daylight saving time
//
// Cron fields and descriptors are matched against the wall clock of the
// schedule's zone. Where the zone's clock jumps, two kinds of schedule behave
// differently (the convention of Vixie cron):
//
//   - A fixed-time schedule — one whose hour field does not cover every hour,
//     such as "30 2 * * *" or @daily — fires once per matching wall time, at the
//     first instant the zone's clock reads that time or later. A wall time
//     skipped by a spring-forward gap fires at the end of the gap (in
//     Europe/Berlin, "30 2 * * *" fires on 2026-03-29 at 03:00 CEST, 01:00 UTC,
//     because 02:30 does not exist that day; several skipped wall times collapse
//     into that one firing). A wall time repeated by a fall-back fires only at
//     its first occurrence (on 2026-10-25, at 02:30 CEST, 00:30 UTC, and not
//     again at 02:30 CET).
//   - A schedule whose hour field covers every hour, such as "*/15 * * * *" or
//     @hourly, follows elapsed time: it fires at every instant whose wall clock
//     matches, so it fires in both passes of a repeated hour and simply has no
//     firings at the wall times a gap skips.
//
// "@every" schedules ignore zones: they fire at the multiples of the interval
// counted from the Unix epoch.
package cronspec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// MinEvery is the shortest interval "@every" accepts.
const MinEvery = time.Second

// allHours is the bit set of a cron hour field that matches every hour.
const allHours = 1<<24 - 1

// zeroToEpoch is the time from Go's zero time (January 1, year 1, UTC) to the
// Unix epoch, in seconds.
const zeroToEpoch = 62135596800

// Schedule is a parsed recurring schedule. Create one with Parse; a Schedule
// is immutable and safe for concurrent use.
type Schedule struct {
	expr, tz string
	loc      *time.Location

	// Cron expressions and descriptors.
	spec  *cron.SpecSchedule // matched in loc, walking elapsed time
	wall  *cron.SpecSchedule // the same fields matched in UTC, used on wall times
	fixed bool               // hour field restricted and loc not UTC: see nextFixed

	// "@every" intervals.
	every time.Duration
	phase time.Duration // (Unix epoch - zero time) mod every
}

// Parse accepts a 5-field cron expression (minute hour dom month dow), a
// 6-field one with leading seconds, a descriptor (@yearly @annually @monthly
// @weekly @daily @midnight @hourly), or "@every <Go duration>" with a duration
// of at least 1s. Month and weekday names (jan, mon, …) and "?" are accepted
// as in github.com/robfig/cron/v3; weekdays run 0–6 from Sunday.
//
// tz is an IANA zone name ("" means UTC); it applies to cron fields and
// descriptors. For "@every" it must be "" or "UTC". "Local" is refused, since
// orchestrators on different hosts must agree. A zone prefix inside expr
// (CRON_TZ=…, TZ=…) is refused too: pass the zone as tz.
//
// Errors say what is wrong, for example
// `cron "61 * * * *": minute: end of range (61) above maximum (59)` or
// `time zone "Mars/Base": unknown time zone Mars/Base`. An expression that can
// never fire, such as "0 0 30 2 *", is an error.
func Parse(expr, tz string) (*Schedule, error) {
	fields := strings.Fields(expr)
	switch {
	case len(fields) == 0:
		return nil, fmt.Errorf("cron %q: empty expression", expr)
	case fields[0] == "@every":
		return parseEvery(expr, tz, fields)
	case strings.HasPrefix(fields[0], "TZ=") || strings.HasPrefix(fields[0], "CRON_TZ="):
		return nil, fmt.Errorf("cron %q: a zone prefix is not allowed in the expression; pass the zone separately", expr)
	}
	loc, err := loadZone(tz)
	if err != nil {
		return nil, err
	}

	var parsed cron.Schedule
	if strings.HasPrefix(fields[0], "@") {
		if len(fields) != 1 {
			return nil, fmt.Errorf("cron %q: descriptor %s takes no fields", expr, fields[0])
		}
		parsed, err = cron.NewParser(cron.Descriptor).Parse(fields[0])
		if err != nil {
			return nil, fmt.Errorf("cron %q: unknown descriptor %s (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>)", expr, fields[0])
		}
	} else {
		if err := checkFields(fields); err != nil {
			return nil, fmt.Errorf("cron %q: %w", expr, err)
		}
		p := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)
		parsed, err = p.Parse(strings.Join(fields, " "))
		if err != nil {
			return nil, fmt.Errorf("cron %q: %w", expr, err)
		}
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("cron %q: unexpected schedule type %T", expr, parsed)
	}
	spec.Location = loc
	wall := *spec
	wall.Location = time.UTC

	s := &Schedule{
		expr:  expr,
		tz:    tz,
		loc:   loc,
		spec:  spec,
		wall:  &wall,
		fixed: spec.Hour&allHours != allHours && loc != time.UTC,
	}
	// Every satisfiable day/month combination occurs within five years of
	// 2000-01-01 (a leap year, for February 29), the horizon of the search.
	if wall.Next(time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("cron %q: never fires (no date matches the day and month fields)", expr)
	}
	return s, nil
}

// checkFields validates the count of cron fields and then each field on its
// own, so that an error can name the field at fault.
func checkFields(fields []string) error {
	names := []string{"second", "minute", "hour", "day of month", "month", "day of week"}
	switch len(fields) {
	case 6:
	case 5:
		names = names[1:]
	default:
		return fmt.Errorf("expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with leading seconds), found %d", len(fields))
	}
	p := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)
	off := 6 - len(fields)
	for i, f := range fields {
		probe := []string{"0", "*", "*", "*", "*", "*"}
		probe[i+off] = f
		if _, err := p.Parse(strings.Join(probe, " ")); err != nil {
			// robfig/cron ends its messages with the offending range; drop it
			// when that is the whole field, which the message already names.
			msg := strings.TrimSuffix(err.Error(), ": "+f)
			return fmt.Errorf("%s: %s", names[i], msg)
		}
	}
	return nil
}

func parseEvery(expr, tz string, fields []string) (*Schedule, error) {
	if tz != "" && tz != "UTC" {
		return nil, fmt.Errorf("cron %q: time zone %q given, but @every intervals are zone-independent (use \"\" or \"UTC\")", expr, tz)
	}
	if len(fields) != 2 {
		return nil, fmt.Errorf("cron %q: want \"@every <duration>\", e.g. \"@every 5m\"", expr)
	}
	d, err := time.ParseDuration(fields[1])
	if err != nil {
		return nil, fmt.Errorf("cron %q: %w", expr, err)
	}
	if d < MinEvery {
		return nil, fmt.Errorf("cron %q: interval %s is below the minimum of %s", expr, d, MinEvery)
	}
	// phase = (Unix epoch - zero time) mod d, computed without overflow: the
	// epoch lies 6.2e19 ns after the zero time, beyond int64.
	hi, lo := bits.Mul64(zeroToEpoch, uint64(time.Second))
	phase := time.Duration(bits.Rem64(hi, lo, uint64(d)))
	return &Schedule{expr: expr, tz: tz, loc: time.UTC, every: d, phase: phase}, nil
}

func loadZone(tz string) (*time.Location, error) {
	switch tz {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("time zone %q: the host's local zone is not allowed; name an IANA zone such as Europe/Berlin", tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("time zone %q: %w", tz, err)
	}
	return loc, nil
}

// Next returns the first fire time strictly after t, in UTC. See the package
// documentation for the behaviour around daylight-saving transitions.
//
// "@every d" fires at the Unix epoch plus the multiples of d, so "@every 1m"
// fires on every full minute and two orchestrators always agree.
//
// Next returns the zero time if the schedule does not fire within about five
// years after t, which only a February 29 schedule near a century year that is
// not a leap year (such as 2100) can do.
func (s *Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		// Truncate counts from the zero time; shift so that multiples of every
		// are counted from the Unix epoch instead.
		// Two Adds: phase + every can overflow a Duration when every is
		// longer than 146 years (phase < every).
		return t.UTC().Add(-s.phase).Truncate(s.every).Add(s.phase).Add(s.every)
	}
	if s.fixed {
		return s.nextFixed(t)
	}
	n := s.spec.Next(t.In(s.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// nextFixed computes Next for a schedule with a restricted hour field in a zone
// that may change its offset. It walks matching wall times (the cron fields
// evaluated in UTC on wall-clock readings) and maps each wall time w to the
// first instant at which the zone's clock reads w or later.
func (s *Schedule) nextFixed(t time.Time) time.Time {
	x := wallTime(t.In(s.loc))
	for {
		w := s.wall.Next(x)
		if w.IsZero() {
			return w
		}
		// at ≤ t only for wall times the clock has already shown, at the first
		// pass of a repeated hour when t is in the second pass.
		if at := reach(s.loc, w); at.After(t) {
			return at.UTC()
		}
		x = w
	}
}

// wallTime returns t's wall-clock reading as a UTC time.
func wallTime(t time.Time) time.Time {
	y, mo, d := t.Date()
	h, mi, sec := t.Clock()
	return time.Date(y, mo, d, h, mi, sec, t.Nanosecond(), time.UTC)
}

// reach returns the first instant at which loc's wall clock reads w (a wall
// time expressed as a UTC time) or later: the first occurrence of w if it
// exists, else the end of the gap that skips it.
func reach(loc *time.Location, w time.Time) time.Time {
	// UTC offsets lie within -12h…+14h, so at x the clock reads before w.
	x := w.Add(-15 * time.Hour).In(loc)
	for {
		_, offset := x.Zone()
		off := time.Duration(offset) * time.Second
		_, end := x.ZoneBounds()
		if end.IsZero() || end.Add(off).After(w) {
			// Within the zone period [x, end) the clock reads instant+off, and
			// it reaches w in this period.
			if first := w.Add(-off); first.After(x) {
				return first
			}
			return x // w was skipped: the period starts after w.
		}
		x = end
	}
}

// String returns the expression and zone as given: the expression alone when
// the zone is "", else the expression followed by the zone in parentheses,
// e.g. "0 2 * * * (Europe/Berlin)".
func (s *Schedule) String() string {
	if s.tz == "" {
		return s.expr
	}
	return s.expr + " (" + s.tz + ")"
}

// Missed returns the fire times in (from, to], oldest first, at most max of
// them (for catch-up after downtime); truncated reports whether more fire
// times in that range were left out. A max ≤ 0 returns no times.
func (s *Schedule) Missed(from, to time.Time, max int) (times []time.Time, truncated bool) {
	for t := from; ; {
		n := s.Next(t)
		if n.IsZero() || n.After(to) {
			return times, false
		}
		if len(times) >= max {
			return times, true
		}
		times = append(times, n)
		t = n
	}
}

// maxIDLen is the longest task id: see task.ValidID.
const maxIDLen = 128

// FireID returns the deterministic task id of a schedule's firing at fire:
// "<name>-<UTC time as 20060102T150405Z>", e.g. "nightly-20261129T020000Z".
// A fire time with sub-second precision (from "@every 1500ms", say) adds the
// fraction in milli-, micro- or nanoseconds after an underscore, as in
// "tick-20261129T020001_500Z" — an underscore, not a dot, because a dot is not
// allowed in task ids. Ids of one schedule sort by fire time as long as its
// fire times share a precision.
//
// The id is always a valid task id (task.ValidID). If name is not a valid
// schedule name or the id would exceed 128 characters, FireID returns a
// shortened deterministic form instead: a sanitised prefix of name, a hash of
// the whole name, and the time.
func FireID(name string, fire time.Time) string {
	suffix := "-" + stamp(fire)
	if ValidName(name) && len(name)+len(suffix) <= maxIDLen {
		return name + suffix
	}
	sum := sha256.Sum256([]byte(name))
	hash := hex.EncodeToString(sum[:8])
	keep := maxIDLen - len(suffix) - len(hash) - 1
	prefix := sanitize(name, keep)
	if prefix == "" {
		return hash + suffix
	}
	return prefix + "-" + hash + suffix
}

// stamp formats fire in UTC as 20060102T150405Z, with an "_" and the
// fraction of the second before the Z when it is not zero.
func stamp(fire time.Time) string {
	u := fire.UTC()
	s := u.Format("20060102T150405")
	if ns := u.Nanosecond(); ns != 0 {
		frac := fmt.Sprintf("%09d", ns)
		switch {
		case ns%1e6 == 0:
			frac = frac[:3]
		case ns%1e3 == 0:
			frac = frac[:6]
		}
		s += "_" + frac
	}
	return s + "Z"
}

// sanitize returns at most n bytes of name with characters not allowed in a
// schedule name replaced by '_' and leading non-alphanumerics dropped.
func sanitize(name string, n int) string {
	var b strings.Builder
	for i := 0; i < len(name) && b.Len() < n; i++ {
		c := name[i]
		switch {
		case isAlnum(c):
			b.WriteByte(c)
		case b.Len() == 0:
			// An id must start with a letter or digit.
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// ValidName reports whether a schedule name is usable: 1–64 characters of
// [A-Za-z0-9_-], starting with a letter or digit.
func ValidName(name string) bool {
	if len(name) == 0 || len(name) > 64 || !isAlnum(name[0]) {
		return false
	}
	for i := 1; i < len(name); i++ {
		if c := name[i]; !isAlnum(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
