package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ax-run/ax/task"
)

// keyLimitsFlag is a repeatable --key-limit: PATTERN:SETTING,SETTING…
// where a setting is concurrency=N, rate=N/DURATION, adaptive, min=N,
// target-latency=DURATION or weight=N.
type keyLimitsFlag struct{ limits *[]task.KeyLimit }

func (f keyLimitsFlag) Type() string { return "pattern:settings" }

func (f keyLimitsFlag) String() string {
	if f.limits == nil {
		return ""
	}
	parts := make([]string, len(*f.limits))
	for i, l := range *f.limits {
		parts[i] = l.Key
	}
	return strings.Join(parts, " ")
}

func (f keyLimitsFlag) Set(s string) error {
	l, err := parseKeyLimit(s)
	if err != nil {
		return err
	}
	*f.limits = append(*f.limits, l)
	return nil
}

// parseKeyLimit parses one --key-limit value and validates it.
func parseKeyLimit(s string) (task.KeyLimit, error) {
	pattern, settings, ok := strings.Cut(s, ":")
	if !ok || settings == "" {
		return task.KeyLimit{}, fmt.Errorf("key limit %q: want PATTERN:SETTING,… (concurrency=N, rate=N/DURATION, adaptive, min=N, target-latency=DURATION, weight=N)", s)
	}
	l := task.KeyLimit{Key: pattern}
	for setting := range strings.SplitSeq(settings, ",") {
		name, value, _ := strings.Cut(setting, "=")
		var err error
		switch name {
		case "concurrency":
			l.Concurrency, err = strconv.Atoi(value)
		case "rate":
			n, per, _ := strings.Cut(value, "/")
			if l.Rate, err = strconv.Atoi(n); err == nil && per != "" {
				var d time.Duration
				d, err = time.ParseDuration(per)
				l.Per = task.Duration(d)
			}
		case "adaptive":
			l.Adaptive = true
		case "min":
			l.MinConcurrency, err = strconv.Atoi(value)
		case "target-latency":
			var d time.Duration
			d, err = time.ParseDuration(value)
			l.TargetLatency = task.Duration(d)
		case "weight":
			l.Weight, err = strconv.Atoi(value)
		default:
			return l, fmt.Errorf("key limit %q: unknown setting %q", s, name)
		}
		if err != nil {
			return l, fmt.Errorf("key limit %q: %s: %w", s, name, err)
		}
	}
	if err := l.Validate(); err != nil {
		return l, fmt.Errorf("key limit %q: %w", s, err)
	}
	return l, nil
}
