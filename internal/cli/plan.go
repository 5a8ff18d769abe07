package cli

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/plan"
)

// planFigure is one input of a plan and where it came from.
type planFigure struct {
	Value  float64 `json:"value"`
	Source string  `json:"source"`
}

type planOutput struct {
	Rate        planFigure `json:"rate_per_second"`
	Wait        planFigure `json:"wait_seconds"`
	Exec        planFigure `json:"exec_seconds"`
	Slots       planFigure `json:"slots_per_executor"`
	Margins     []float64  `json:"margins"`
	Backlog     float64    `json:"backlog"`
	Concurrency float64    `json:"concurrency"`
	Executors   int        `json:"executors"`
	WithMargin  []int      `json:"executors_with_margin"`
	Now         *planNow   `json:"now,omitempty"`
	// Autoscaling is the matching KEDA thresholds (plan_autoscaling.go).
	Autoscaling planAutoscaling `json:"autoscaling"`
}

// planNow is what the scraped metrics say about the present.
type planNow struct {
	Backlog   float64 `json:"backlog"`
	Executors int     `json:"executors"`
}

func planCmd(g *globals) *cobra.Command {
	var rate float64
	var wait, exec, interval time.Duration
	var slots float64
	var margins []float64
	var urls []string
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Capacity planning: backlog ≈ S × T_wait, concurrency ≈ S × T_exec, executors with a 30–50 % margin",
		Long: `Apply the design notes' capacity formula to given figures or to live metrics:

  backlog            ≈ S × T_wait     (S: new tasks per second; T_wait: submission → end)
  concurrency needed ≈ S × T_exec     (T_exec: a handler's run time)
  executors          = concurrency × (1 + margin) / slots per executor, rounded up

With --metrics (an orchestrator's and an executor's /metrics URLs, repeatable)
the figures not given are measured: both are scraped twice, --interval apart;
S is the tasks that ended per second (in a steady state, the arrival rate),
T_wait the mean submission → success time, T_exec the mean handler time, the
slots the executors' mean capacity. It prints every figure with its source.

It also prints the thresholds of autoscaling one capability's executors on
its backlog (KEDA, deploy/helm/ax values executors[].autoscaling): the
backlog one executor drains within T_wait (slots / T_exec × T_wait), the
dispatches one executor holds (its slots), the oldest backlog age that adds
executors (T_wait), and 0 to the executors with the largest margin. Give
one capability's figures (or scrape its executors) for its thresholds.`,
		Example: `  ax plan --rate 5000 --wait 10s --exec 500ms --slots 200
  ax plan --metrics http://orchestrator:9464/metrics --metrics http://worker-1:9464/metrics --interval 30s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			out := planOutput{Margins: margins}
			given := func(name string, v float64) planFigure { return planFigure{v, "given (--" + name + ")"} }
			if f.Changed("rate") {
				out.Rate = given("rate", rate)
			}
			if f.Changed("wait") {
				out.Wait = given("wait", wait.Seconds())
			}
			if f.Changed("exec") {
				out.Exec = given("exec", exec.Seconds())
			}
			if f.Changed("slots") {
				out.Slots = given("slots", slots)
			}
			if len(urls) > 0 {
				if err := measure(cmd.Context(), urls, interval, &out); err != nil {
					return err
				}
			}
			if out.Slots.Source == "" {
				out.Slots = planFigure{slots, "default (--slots: an executor's default capacity of 16 unit-cost tasks)"}
			}
			var missing []string
			for name, fig := range map[string]planFigure{"rate": out.Rate, "wait": out.Wait, "exec": out.Exec} {
				if fig.Source == "" {
					missing = append(missing, "--"+name)
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("plan: give %s, or --metrics URLs to measure them (an executor's for the handler time)", strings.Join(missing, ", "))
			}
			p, err := plan.Make(plan.Inputs{Rate: out.Rate.Value, Wait: out.Wait.Value, Exec: out.Exec.Value, Slots: out.Slots.Value, Margins: margins})
			if err != nil {
				return err
			}
			out.Margins, out.Backlog, out.Concurrency, out.Executors, out.WithMargin = p.Margins, p.Backlog, p.Concurrency, p.Executors, p.WithMargin
			out.Autoscaling = autoscalingOf(p)
			if g.jsonOutput() {
				return g.printJSON(out)
			}
			printPlan(g, out)
			return nil
		},
	}
	f := cmd.Flags()
	f.Float64Var(&rate, "rate", 0, "S: new tasks per second")
	f.DurationVar(&wait, "wait", 0, "T_wait: how long a task takes from submission to its end")
	f.DurationVar(&exec, "exec", 0, "T_exec: how long a handler runs")
	f.Float64Var(&slots, "slots", 16, "tasks one executor runs at once (its capacity / the tasks' mean estimated_cost)")
	f.Float64SliceVar(&margins, "margin", plan.DefaultMargins, "peak margins to size for")
	f.StringArrayVar(&urls, "metrics", nil, "a /metrics URL of an orchestrator or executor to measure the figures not given (repeatable)")
	f.DurationVar(&interval, "interval", 10*time.Second, "with --metrics: how long to measure")
	return cmd
}

func printPlan(g *globals, out planOutput) {
	w := g.stdout
	fmt.Fprintln(w, "Capacity plan (backlog ≈ S × T_wait; concurrency ≈ S × T_exec; executors with a margin for peaks)")
	fmt.Fprintln(w, "Assumed:")
	fmt.Fprintf(w, "  S       %-14s %s\n", fmt.Sprintf("%.4g tasks/s", out.Rate.Value), out.Rate.Source)
	fmt.Fprintf(w, "  T_wait  %-14s %s\n", seconds(out.Wait.Value), out.Wait.Source)
	fmt.Fprintf(w, "  T_exec  %-14s %s\n", seconds(out.Exec.Value), out.Exec.Source)
	fmt.Fprintf(w, "  slots   %-14s %s\n", fmt.Sprintf("%.4g/executor", out.Slots.Value), out.Slots.Source)
	fmt.Fprintln(w, "Result:")
	fmt.Fprintf(w, "  backlog      ≈ %.0f tasks queued or waiting\n", out.Backlog)
	fmt.Fprintf(w, "  concurrency  ≈ %.1f tasks running at once\n", out.Concurrency)
	var margins []string
	for i, m := range out.Margins {
		margins = append(margins, fmt.Sprintf("%d with a %.0f %% margin", out.WithMargin[i], 100*m))
	}
	fmt.Fprintf(w, "  executors    %d without margin; %s\n", out.Executors, strings.Join(margins, "; "))
	if out.Now != nil {
		fmt.Fprintf(w, "Now: backlog %.0f, %d executors scraped\n", out.Now.Backlog, out.Now.Executors)
	}
	printAutoscaling(g, out.Autoscaling)
}

func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond).String()
}

// measure scrapes urls twice, interval apart, and fills the figures out
// does not have yet from the differences.
func measure(ctx context.Context, urls []string, interval time.Duration, out *planOutput) error {
	first, err := scrapeAll(ctx, urls)
	if err != nil {
		return err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(interval):
	}
	second, err := scrapeAll(ctx, urls)
	if err != nil {
		return err
	}
	elapsed := time.Since(start).Seconds()
	over := fmt.Sprintf("measured over %s at %s", time.Duration(elapsed*float64(time.Second)).Round(time.Millisecond), strings.Join(urls, ", "))
	d := func(name string, labels map[string]string) float64 {
		return second.sum(name, labels) - first.sum(name, labels)
	}
	if out.Rate.Source == "" {
		ended := 0.0
		for _, st := range []string{"succeeded", "failed", "cancelled", "expired"} {
			ended += d("ax_transitions_total", map[string]string{"to": st})
		}
		out.Rate = planFigure{ended / elapsed, "tasks ended per second, " + over}
	}
	mean := func(hist string) (float64, bool) {
		n := d(hist+"_count", nil)
		if n <= 0 {
			return 0, false
		}
		return d(hist+"_sum", nil) / n, true
	}
	if out.Wait.Source == "" {
		if m, ok := mean("ax_submit_to_finish_seconds"); ok {
			out.Wait = planFigure{m, "mean submission → success, " + over}
		}
	}
	if out.Exec.Source == "" {
		if m, ok := mean("ax_executor_handler_seconds"); ok {
			out.Exec = planFigure{m, "mean handler time, " + over}
		}
	}
	now := &planNow{Backlog: second.sumOfMax("ax_backlog_tasks")}
	capacity := 0.0
	for _, s := range second {
		if v, ok := s.value("ax_executor_capacity"); ok {
			now.Executors++
			capacity += v
		}
	}
	if out.Slots.Source == "" && now.Executors > 0 {
		out.Slots = planFigure{capacity / float64(now.Executors), fmt.Sprintf("mean capacity of the %d executors scraped (unit-cost tasks)", now.Executors)}
	}
	out.Now = now
	return nil
}

// scraped are the metric families of each URL.
type scraped []families

type families map[string]*dto.MetricFamily

func scrapeAll(ctx context.Context, urls []string) (scraped, error) {
	var out scraped
	for _, u := range urls {
		f, err := scrapeURL(ctx, u)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

func scrapeURL(ctx context.Context, url string) (families, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return fams, nil
}

// sum adds a series over every URL and every label set matching labels;
// name may be a histogram's _sum or _count.
func (s scraped) sum(name string, labels map[string]string) float64 {
	total := 0.0
	for _, f := range s {
		total += f.sum(name, labels)
	}
	return total
}

// sumOfMax is a gauge summed over its label sets, each the max over URLs
// (the sampled gauges every orchestrator exports alike).
func (s scraped) sumOfMax(name string) float64 {
	best := map[string]float64{}
	for _, f := range s {
		fam := f[name]
		if fam == nil {
			continue
		}
		for _, m := range fam.GetMetric() {
			key := fmt.Sprint(m.GetLabel())
			best[key] = max(best[key], m.GetGauge().GetValue())
		}
	}
	total := 0.0
	for _, v := range best {
		total += v
	}
	return total
}

func (f families) sum(name string, labels map[string]string) float64 {
	base, part := name, ""
	for _, suffix := range []string{"_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, suffix); ok && f[name] == nil && f[b] != nil {
			base, part = b, suffix
		}
	}
	fam := f[base]
	if fam == nil {
		return 0
	}
	total := 0.0
metric:
	for _, m := range fam.GetMetric() {
		for _, l := range m.GetLabel() {
			if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
				continue metric
			}
		}
		switch {
		case part == "_sum":
			total += m.GetHistogram().GetSampleSum()
		case part == "_count":
			total += float64(m.GetHistogram().GetSampleCount())
		case m.GetCounter() != nil:
			total += m.GetCounter().GetValue()
		default:
			total += m.GetGauge().GetValue()
		}
	}
	return total
}

func (f families) value(name string) (float64, bool) {
	fam := f[name]
	if fam == nil || len(fam.GetMetric()) == 0 {
		return 0, false
	}
	return fam.GetMetric()[0].GetGauge().GetValue(), true
}
