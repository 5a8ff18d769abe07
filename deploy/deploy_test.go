// Package deploy_test checks what deploy/ ships for operators: the
// Prometheus alert rules (promtool check and unit tests) and the Grafana
// dashboard, and that every metric they use is exported by a running stack.
package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/executor/promexec"
	"github.com/ax-run/ax/internal/metrics"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/orchestrator/promorch"
	"github.com/ax-run/ax/task"
)

const rulesFile, rulesTests = "prometheus/ax-rules.yml", "prometheus/ax-rules.test.yml"

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: run scripts/ensure-promtool (as root it installs Debian's prometheus package), or put promtool on PATH")
	}
	return p
}

// TestAlertRules runs promtool's checks and the rules' unit tests, and
// checks that every alert has a runbook and a unit test.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTests}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	rules := read(t, rulesFile)
	tests := read(t, rulesTests)
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\S+)`).FindAllStringSubmatch(rules, -1)
	if len(alerts) < 10 {
		t.Fatalf("found %d alerts in %s", len(alerts), rulesFile)
	}
	blocks := regexp.MustCompile(`(?m)^\s*- alert: `).Split(rules, -1)[1:]
	for i, a := range alerts {
		name := a[1]
		if !strings.Contains(blocks[i], "runbook:") {
			t.Errorf("alert %s has no runbook annotation", name)
		}
		// A test that expects it to fire (exp_alerts with an entry).
		fires := regexp.MustCompile(`alertname: ` + name + `\n\s*exp_alerts:\n\s*- exp_labels`)
		if !fires.MatchString(tests) {
			t.Errorf("alert %s has no unit test in which it fires", name)
		}
	}
}

// TestDashboard parses the Grafana dashboard and checks its layout: the
// first row is the total backlog and the P0 scheduling delay.
func TestDashboard(t *testing.T) {
	t.Parallel()
	var d struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string                   `json:"title"`
			Type    string                   `json:"type"`
			GridPos struct{ X, Y, W, H int } `json:"gridPos"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(read(t, "grafana/ax-dashboard.json")), &d); err != nil {
		t.Fatalf("parse the dashboard: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Fatalf("dashboard title %q uid %q", d.Title, d.UID)
	}
	var first []string
	var rows []string
	for _, p := range d.Panels {
		if p.Type == "row" {
			rows = append(rows, p.Title)
			continue
		}
		if p.GridPos.Y == 0 {
			first = append(first, p.Title+": "+exprs(p.Targets))
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
	sort.Strings(first)
	if len(first) != 2 || !strings.Contains(first[0], "ax_scheduling_delay_seconds_bucket{priority=\"0\"}") && !strings.Contains(first[1], "ax_scheduling_delay_seconds_bucket{priority=\"0\"}") ||
		!strings.Contains(strings.Join(first, " "), "ax_backlog_tasks") {
		t.Errorf("the first row is not the total backlog and the P0 scheduling delay: %q", first)
	}
	for _, want := range []string{"Backlog", "Throughput", "Retries", "Executors", "Breakers", "Mirror"} {
		if !slices.ContainsFunc(rows, func(r string) bool { return strings.Contains(r, want) }) {
			t.Errorf("no dashboard row about %q (rows %q)", want, rows)
		}
	}
}

func exprs(ts []struct {
	Expr string `json:"expr"`
}) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.Expr)
	}
	return strings.Join(s, " ")
}

// eventDriven are metrics whose series appear only after a rare event (a
// repair, a consume loop recreated, a redelivery): the stack below does
// not provoke those, so they must be registered, not yet scraped.
var eventDriven = []string{"ax_reconciler_repairs_total", "ax_reconciler_checks_total",
	"ax_reconciler_oldest_unfinished_seconds", "ax_consumer_restarts_total", "ax_redeliveries_total"}

// TestEveryMetricUsedIsExported runs an orchestrator and an executor
// through a workload that makes the series appear (retries, a dead letter,
// an open breaker, a pause, a backlog nobody serves), scrapes them over
// HTTP and checks that each metric named by the alert rules (queries and
// runbooks) and the dashboard is there; and that deploy/metrics.md
// documents exactly the metrics registered.
func TestEveryMetricUsedIsExported(t *testing.T) {
	t.Parallel()
	used := map[string][]string{}
	name := regexp.MustCompile(`\bax_[a-z0-9_]+`)
	for _, f := range []string{rulesFile, "grafana/ax-dashboard.json"} {
		for _, n := range name.FindAllString(read(t, f), -1) {
			if !slices.Contains(used[n], f) {
				used[n] = append(used[n], f)
			}
		}
	}
	if len(used) < 20 {
		t.Fatalf("found only %d metric names in the rules and the dashboard", len(used))
	}

	srv := testenv.NATS(t)
	reg := &recorder{Registry: prometheus.NewRegistry(), names: map[string]bool{}}
	om := promorch.New(reg)
	om.Watch(testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Metrics: om, SampleInterval: 50 * time.Millisecond,
		Retry:   orchestrator.RetryPolicy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Breaker: orchestrator.BreakerConfig{MinVolume: 2, Cooldown: time.Hour}}))
	em := promexec.New(reg)
	ex := testenv.Executor(t, srv.URL(), executor.Config{Metrics: em, Hooks: []executor.AttemptHook{em.Hook}})
	em.Watch(ex)
	ex.HandleFunc("ok", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	ex.HandleFunc("bad", func(context.Context, *executor.Job) (any, error) { return nil, errors.New("always fails") })
	testenv.Start(t, ex)
	// The mirror's and the relay's gauges as ax mirror and ax relay
	// register them (running those needs MySQL; internal/cli feeds them).
	metrics.NewMirror(reg)
	metrics.NewRelay(reg, func() float64 { return 0 }, func() float64 { return 0 })
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	submit := func(id, typ, capability string, retries int) {
		t.Helper()
		s, _ := task.New(typ, nil)
		s.ID, s.MaxRetries = id, new(retries)
		if capability != "" {
			s.Capability = capability
		}
		if _, err := c.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	submit("ok-1", "ok", "", 0)
	submit("bad-1", "bad", "", 1) // a retry, then a dead letter; the breaker opens
	submit("queued-1", "ok", "nobody", 0)
	for _, id := range []string{"ok-1", "bad-1"} {
		if _, err := c.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Pause(ctx, "ok", false, "deploy test"); err != nil {
		t.Fatal(err)
	}

	web := httptest.NewServer(promhttp.HandlerFor(reg.Registry, promhttp.HandlerOpts{}))
	t.Cleanup(web.Close)
	var missing []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		exported := scrape(t, web.URL)
		missing = missing[:0]
		for n, files := range used {
			if !exported[n] && !(slices.Contains(eventDriven, n) && reg.names[n]) {
				missing = append(missing, n+" (used in "+strings.Join(files, ", ")+")")
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("metrics used by deploy/ but not exported:\n%s", strings.Join(missing, "\n"))
	}

	// metrics.md documents every registered metric, and no other.
	doc := read(t, "metrics.md")
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(ax_[a-z0-9_]+)` \\|").FindAllStringSubmatch(doc, -1) {
		documented[m[1]] = true
	}
	for n := range reg.names {
		if strings.HasPrefix(n, "ax_") && !documented[n] {
			t.Errorf("metric %s is registered but not documented in deploy/metrics.md", n)
		}
	}
	for n := range documented {
		if !reg.names[n] {
			t.Errorf("deploy/metrics.md documents %s, which is not registered", n)
		}
	}
}

// recorder is a registry that remembers the name of every metric
// registered on it.
type recorder struct {
	*prometheus.Registry
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return r.Registry.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// scrape returns the metric names served at url, with each histogram's
// _bucket, _sum and _count series.
func scrape(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the scrape: %v", err)
	}
	out := map[string]bool{}
	for n, f := range fams {
		if len(f.GetMetric()) == 0 {
			continue
		}
		out[n] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			out[n+"_bucket"], out[n+"_sum"], out[n+"_count"] = true, true, true
		}
	}
	return out
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
