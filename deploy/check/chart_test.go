package check

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	kedav1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

const chartDir = "../helm/ax"

// Values files the chart is rendered with: the defaults, and every
// feature on.
var valueSets = map[string]string{"default": "", "full": "testdata/full-values.yaml"}

// decoder decodes a manifest strictly: an unknown or duplicated field is
// an error, as `kubectl apply --validate=strict` makes it. It knows the
// Kubernetes API, KEDA's and the Prometheus Operator's types.
var decoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{scheme.AddToScheme, kedav1.AddToScheme, monv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, s, s, kjson.SerializerOptions{Yaml: true, Strict: true})
}()

func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	if file == "" {
		return map[string]any{}
	}
	v, err := chartutil.ReadValuesFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// render renders the chart as `helm template --namespace ax ax deploy/helm/ax -f values`
// does, values.schema.json included, and returns each manifest by file.
func render(t *testing.T, values map[string]any) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load the chart: %v", err)
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: "ax", Namespace: "ax", Revision: 1, IsInstall: true},
		chartutil.DefaultCapabilities.Copy())
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, vals)
}

// object is one decoded manifest.
type object struct {
	file string
	obj  runtime.Object
}

// decodeAll splits the rendered files into manifests and decodes each
// strictly.
func decodeAll(t *testing.T, files map[string]string) []object {
	t.Helper()
	var names []string
	for f := range files {
		names = append(names, f)
	}
	sort.Strings(names)
	var out []object
	for _, f := range names {
		if strings.HasSuffix(f, "NOTES.txt") {
			continue
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(files[f], -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			obj, gvk, err := decoder.Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Errorf("%s, document %d: %v\n%s", f, i, err, doc)
				continue
			}
			if gvk.Kind == "" {
				t.Errorf("%s, document %d has no kind", f, i)
			}
			out = append(out, object{f, obj})
		}
	}
	return out
}

func stripComments(doc string) string {
	return regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")
}

// TestChartLint runs helm lint (through the Helm module) on the chart with
// both value sets, failing on a warning as `helm lint --strict` does.
func TestChartLint(t *testing.T) {
	for name, file := range valueSets {
		l := lint.All(chartDir, readValues(t, file), "ax", false)
		for _, m := range l.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("helm lint (%s values): %s", name, m)
			} else {
				t.Logf("helm lint (%s values): %s", name, m)
			}
		}
	}
}

// TestChartRendersStrictly renders both value sets and decodes every
// manifest strictly into its Go type; then checks what each set must
// hold.
func TestChartRendersStrictly(t *testing.T) {
	for name, file := range valueSets {
		t.Run(name, func(t *testing.T) {
			values := readValues(t, file)
			files, err := render(t, values)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			if dir := os.Getenv("AX_CHART_DUMP"); dir != "" { // look at what helm template prints
				for f, body := range files {
					out := filepath.Join(dir, name, f)
					_ = os.MkdirAll(filepath.Dir(out), 0o755)
					_ = os.WriteFile(out, []byte(body), 0o644)
				}
			}
			objs := decodeAll(t, files)
			if t.Failed() {
				return
			}
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[fmt.Sprintf("%T", o.obj)]++
			}
			t.Logf("%s values render %v", name, kinds)
			checkObjects(t, name, objs)
		})
	}
}

// TestStrictDecodingCatchesTypos: a misspelt field in a rendered
// Deployment, ScaledObject or PrometheusRule fails to decode.
func TestStrictDecodingCatchesTypos(t *testing.T) {
	files, err := render(t, readValues(t, valueSets["full"]))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, field, typo string }{
		{"ax/templates/orchestrator.yaml", "terminationGracePeriodSeconds:", "terminationGracePeriodSecond:"},
		{"ax/templates/keda.yaml", "minReplicaCount:", "minReplicasCount:"},
		{"ax/templates/monitoring.yaml", "runbook:", "runbook:"}, // annotations are free-form: must still decode
		{"ax/templates/monitoring.yaml", "- alert:", "- alarm:"},
		{"ax/templates/console.yaml", "pathType:", "pathtype:"},
	} {
		doc := files[tc.file]
		if !strings.Contains(doc, tc.field) {
			t.Fatalf("%s has no %s", tc.file, tc.field)
		}
		bad := strings.Replace(doc, tc.field, tc.typo, 1)
		var failed bool
		for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(bad, -1) {
			if strings.TrimSpace(stripComments(d)) == "" {
				continue
			}
			if _, _, err := decoder.Decode([]byte(d), nil, nil); err != nil {
				failed = true
				if !strings.Contains(err.Error(), strings.TrimSuffix(strings.TrimPrefix(tc.typo, "- "), ":")) {
					t.Errorf("%s: the error does not name %s: %v", tc.file, tc.typo, err)
				}
			}
		}
		if want := tc.field != tc.typo; failed != want {
			t.Errorf("%s with %q instead of %q: decoding failed %v, want %v", tc.file, tc.typo, tc.field, failed, want)
		}
	}
}

// TestValuesSchema: values.schema.json refuses what the chart cannot run.
func TestValuesSchema(t *testing.T) {
	for name, vals := range map[string]string{
		"one orchestrator":                `orchestrator: {replicas: 1}`,
		"unknown key":                     `orchestrater: {replicas: 3}`,
		"autoscaling without thresholds":  `executors: [{name: email, capabilities: [email], autoscaling: {enabled: true, maxReplicas: 5}}]`,
		"executor without capabilities":   `executors: [{name: email, capabilities: []}]`,
		"password auth without a secret":  `nats: {auth: {mode: password, existingSecret: ""}}`,
		"mirror without a DSN secret":     `mirror: {enabled: true}`,
		"a NATS URL that is not one":      `nats: {url: "localhost:4222"}`,
		"an executor name with uppercase": `executors: [{name: Email, capabilities: [email]}]`,
	} {
		v, err := chartutil.ReadValues([]byte(vals))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := render(t, v); err == nil {
			t.Errorf("%s (%s) rendered", name, vals)
		} else if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") {
			t.Errorf("%s: not refused by the schema: %v", name, err)
		}
	}
}

// checkObjects checks the decoded objects of one value set.
func checkObjects(t *testing.T, set string, objs []object) {
	deployments := map[string]*appsv1.Deployment{}
	var pdbs []*policyv1.PodDisruptionBudget
	var services []*corev1.Service
	var ingresses []*networkingv1.Ingress
	var scaled []*kedav1.ScaledObject
	var rules []*monv1.PrometheusRule
	var monitors []*monv1.PodMonitor
	var configMaps []*corev1.ConfigMap
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *appsv1.Deployment:
			deployments[v.Name] = v
		case *policyv1.PodDisruptionBudget:
			pdbs = append(pdbs, v)
		case *corev1.Service:
			services = append(services, v)
		case *networkingv1.Ingress:
			ingresses = append(ingresses, v)
		case *kedav1.ScaledObject:
			scaled = append(scaled, v)
		case *monv1.PrometheusRule:
			rules = append(rules, v)
		case *monv1.PodMonitor:
			monitors = append(monitors, v)
		case *corev1.ConfigMap:
			configMaps = append(configMaps, v)
		default:
			t.Errorf("%s: unexpected %T", o.file, o.obj)
		}
	}

	// Orchestrators: at least two, spread over nodes, a budget that keeps one.
	orch := deployments["ax-orchestrator"]
	if orch == nil {
		t.Fatalf("no ax-orchestrator Deployment")
	}
	if orch.Spec.Replicas == nil || *orch.Spec.Replicas < 2 {
		t.Errorf("orchestrator replicas %v", orch.Spec.Replicas)
	}
	aff := orch.Spec.Template.Spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil ||
		len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution)+len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Errorf("orchestrators have no pod anti-affinity")
	} else {
		for _, term := range aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			selects(t, "orchestrator anti-affinity", term.PodAffinityTerm.LabelSelector.MatchLabels, orch)
		}
		for _, term := range aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			selects(t, "orchestrator anti-affinity", term.LabelSelector.MatchLabels, orch)
		}
	}
	if len(pdbs) != 1 || pdbs[0].Spec.MinAvailable == nil || pdbs[0].Spec.MinAvailable.IntValue() < 1 {
		t.Errorf("orchestrator PodDisruptionBudget: %+v", pdbs)
	} else {
		selects(t, "PodDisruptionBudget", pdbs[0].Spec.Selector.MatchLabels, orch)
	}

	// Every Deployment: selector matches its pods, probes on a declared
	// port, resources requested, non-root, and every ax command line and
	// environment variable is one ax accepts.
	help := axHelp(t, "orchestrator", "worker", "mirror", "console")
	for name, d := range deployments {
		selects(t, name+" selector", d.Spec.Selector.MatchLabels, d)
		ps := d.Spec.Template.Spec
		if ps.SecurityContext == nil || ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: pods may run as root", name)
		}
		volumes := map[string]bool{}
		for _, v := range ps.Volumes {
			volumes[v.Name] = true
		}
		for _, c := range ps.Containers {
			where := name + "/" + c.Name
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s: no cpu and memory requests", where)
			}
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			userImage := !strings.HasPrefix(c.Image, "localhost/ax:")
			for _, probe := range []struct {
				name string
				p    *corev1.Probe
				path string
			}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
				if probe.p == nil {
					if !userImage {
						t.Errorf("%s: no %s probe", where, probe.name)
					}
					continue
				}
				g := probe.p.HTTPGet
				if g == nil || g.Path != probe.path || ports[g.Port.String()] == 0 {
					t.Errorf("%s: %s probe %+v is not GET %s on a declared port %v", where, probe.name, g, probe.path, ports)
				}
			}
			for _, m := range c.VolumeMounts {
				if !volumes[m.Name] {
					t.Errorf("%s mounts %s, which is not a volume", where, m.Name)
				}
			}
			if userImage {
				continue
			}
			axAccepts(t, where, c.Args)
			// The probe port is where the command serves them.
			listen := ""
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--metrics-addr="); ok {
					listen = v
				}
				if v, ok := strings.CutPrefix(a, "--addr="); ok {
					listen = v
				}
			}
			if c.ReadinessProbe != nil {
				if want := fmt.Sprintf(":%d", ports[c.ReadinessProbe.HTTPGet.Port.String()]); !strings.HasSuffix(listen, want) {
					t.Errorf("%s: probes on port %s but the command listens on %q", where, want, listen)
				}
			}
			for _, e := range c.Env {
				if strings.HasPrefix(name, "ax-executor-") && slices.Contains([]string{"AX_CAPABILITIES", "AX_METRICS_ADDR"}, e.Name) {
					continue // for executors' own mains (README.md)
				}
				if strings.HasPrefix(e.Name, "OTEL_") {
					continue // the OpenTelemetry SDK's own (README.md, Tracing)
				}
				if !regexp.MustCompile(`\b` + e.Name + `\b`).MatchString(help) {
					t.Errorf("%s: ax reads no environment variable %s", where, e.Name)
				}
			}
		}
	}

	// Services and the Ingress point at pods and ports that exist.
	for _, s := range services {
		var target *appsv1.Deployment
		for _, d := range deployments {
			if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
				target = d
			}
		}
		if target == nil {
			t.Errorf("Service %s selects no pods", s.Name)
			continue
		}
		for _, p := range s.Spec.Ports {
			if !containerHasPort(target, p.TargetPort.String()) {
				t.Errorf("Service %s targets port %s, which %s does not declare", s.Name, p.TargetPort.String(), target.Name)
			}
		}
	}
	for _, ing := range ingresses {
		for _, r := range ing.Spec.Rules {
			for _, p := range r.HTTP.Paths {
				if !slices.ContainsFunc(services, func(s *corev1.Service) bool {
					return s.Name == p.Backend.Service.Name && slices.ContainsFunc(s.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Name == p.Backend.Service.Port.Name })
				}) {
					t.Errorf("Ingress %s routes to %s:%s, which is no Service port", ing.Name, p.Backend.Service.Name, p.Backend.Service.Port.Name)
				}
			}
		}
	}

	for _, so := range scaled {
		checkScaledObject(t, so, deployments)
	}
	for _, r := range rules {
		checkRules(t, r)
	}
	for _, cm := range configMaps {
		checkDashboard(t, cm)
	}
	for _, m := range monitors {
		for _, d := range deployments {
			if d.Spec.Template.Labels["ax.run/metrics-job"] != "" && !labels.SelectorFromSet(m.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("PodMonitor %s does not select %s", m.Name, d.Name)
			}
		}
	}

	switch set {
	case "default":
		if len(scaled)+len(rules)+len(configMaps)+len(monitors)+len(ingresses) != 0 || deployments["ax-mirror"] != nil {
			t.Errorf("default values render optional objects")
		}
		if deployments["ax-console"] == nil || len(services) != 1 {
			t.Errorf("default values: no console and its Service")
		}
	case "full":
		if len(scaled) == 0 || len(rules) != 1 || len(configMaps) != 1 || len(monitors) != 1 || len(ingresses) != 1 || deployments["ax-mirror"] == nil {
			t.Errorf("full values lack an object: %d ScaledObjects, %d PrometheusRules, %d ConfigMaps, %d PodMonitors, %d Ingresses, mirror %v",
				len(scaled), len(rules), len(configMaps), len(monitors), len(ingresses), deployments["ax-mirror"] != nil)
		}
	}
}

func selects(t *testing.T, what string, sel map[string]string, d *appsv1.Deployment) {
	t.Helper()
	if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("%s %v does not select the pods of %s (%v)", what, sel, d.Name, d.Spec.Template.Labels)
	}
}

func containerHasPort(d *appsv1.Deployment, name string) bool {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

// checkScaledObject: it scales a rendered executor Deployment from zero on
// its capabilities' backlog, in-hand dispatches and oldest age, and every
// query is valid PromQL (promtool).
func checkScaledObject(t *testing.T, so *kedav1.ScaledObject, deployments map[string]*appsv1.Deployment) {
	t.Helper()
	d := deployments[so.Spec.ScaleTargetRef.Name]
	if d == nil || so.Spec.ScaleTargetRef.Kind != "Deployment" {
		t.Errorf("ScaledObject %s scales %+v, which is not a rendered Deployment", so.Name, so.Spec.ScaleTargetRef)
		return
	}
	if d.Spec.Replicas != nil {
		t.Errorf("%s has replicas set although KEDA scales it (an upgrade would reset them)", d.Name)
	}
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount != 0 || so.Spec.MaxReplicaCount == nil || *so.Spec.MaxReplicaCount < 1 {
		t.Errorf("ScaledObject %s: min %v max %v, want scale to zero", so.Name, so.Spec.MinReplicaCount, so.Spec.MaxReplicaCount)
	}
	caps := strings.Split(d.Labels["ax.run/capabilities"], ".")
	var metrics []string
	for _, tr := range so.Spec.Triggers {
		if tr.Type != "prometheus" || tr.Metadata["serverAddress"] == "" || tr.Metadata["threshold"] == "" {
			t.Errorf("ScaledObject %s trigger %s: %+v", so.Name, tr.Name, tr)
		}
		q := tr.Metadata["query"]
		for _, c := range caps {
			if !strings.Contains(q, c) {
				t.Errorf("ScaledObject %s query %q does not select capability %s", so.Name, q, c)
			}
		}
		metrics = append(metrics, regexp.MustCompile(`ax_[a-z_]+`).FindString(q))
		promQL(t, so.Name+"/"+tr.Name, q)
	}
	slices.Sort(metrics)
	if want := []string{"ax_backlog_oldest_seconds", "ax_backlog_tasks", "ax_dispatches_in_hand"}; !slices.Equal(metrics, want) {
		t.Errorf("ScaledObject %s scales on %v, want %v", so.Name, metrics, want)
	}
}

// promQL checks an expression with promtool (installed by
// scripts/ensure-promtool), as a recording rule.
func promQL(t *testing.T, name, expr string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: run scripts/ensure-promtool (as root it installs Debian's prometheus package)")
	}
	rule := map[string]any{"groups": []any{map[string]any{"name": "check", "rules": []any{map[string]any{"record": "ax:check", "expr": expr}}}}}
	b, _ := yaml.Marshal(rule)
	f := filepath.Join(t.TempDir(), "rule.yml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "check", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("%s: %q is not valid PromQL: %v\n%s", name, expr, err, out)
	}
}

// checkRules: the PrometheusRule holds exactly deploy/prometheus/ax-rules.yml.
func checkRules(t *testing.T, r *monv1.PrometheusRule) {
	t.Helper()
	b, err := os.ReadFile("../prometheus/ax-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var want monv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(b, &want); err != nil {
		t.Fatalf("deploy/prometheus/ax-rules.yml as a PrometheusRule spec: %v", err)
	}
	got, _ := json.Marshal(r.Spec)
	exp, _ := json.Marshal(want)
	if string(got) != string(exp) || len(want.Groups) == 0 {
		t.Errorf("the PrometheusRule is not deploy/prometheus/ax-rules.yml")
	}
}

// checkDashboard: the ConfigMap holds exactly deploy/grafana/ax-dashboard.json.
func checkDashboard(t *testing.T, cm *corev1.ConfigMap) {
	t.Helper()
	b, err := os.ReadFile("../grafana/ax-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["ax-dashboard.json"]; strings.TrimSpace(got) != strings.TrimSpace(string(b)) {
		t.Errorf("ConfigMap %s is not deploy/grafana/ax-dashboard.json", cm.Name)
	}
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap %s lacks the sidecar's label grafana_dashboard: \"1\"", cm.Name)
	}
}

// TestPlanNamesTheChartValues: ax plan prints its thresholds under the
// names of the chart's autoscaling values.
func TestPlanNamesTheChartValues(t *testing.T) {
	ax, _ := build(t)
	out, err := exec.Command(ax, "plan", "--rate", "100", "--wait", "5s", "--exec", "200ms", "--slots", "8").CombinedOutput()
	if err != nil {
		t.Fatalf("ax plan: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Executors struct {
				Items struct {
					Properties struct {
						Autoscaling struct {
							Properties map[string]any
						}
					}
				}
			}
		}
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	props := schema.Properties.Executors.Items.Properties.Autoscaling.Properties
	for _, name := range []string{"backlogPerReplica", "inHandPerReplica", "oldestSeconds", "minReplicas", "maxReplicas"} {
		if props[name] == nil {
			t.Errorf("the chart has no executors[].autoscaling.%s", name)
		}
		if !regexp.MustCompile(`(?m)^  ` + name + ` +\d`).Match(out) {
			t.Errorf("ax plan prints no %s:\n%s", name, out)
		}
	}
}
