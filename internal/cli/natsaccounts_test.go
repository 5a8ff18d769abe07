package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/ax-run/ax/internal/permission"
)

func TestNATSAccounts(t *testing.T) {
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Run(context.Background(), append([]string{"nats-accounts"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	sample, err := permission.Sample().Conf()
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run(); code != 0 || out != sample {
		t.Fatalf("without flags: exit %d, %s; want the sample account", code, errOut)
	}
	code, out, errOut := run("--executor", "gpu", "--executor", "pdf=pdf.render,pdf.merge", "--producer", "shop=order.>",
		"--producers-cancel", "--operator", "alice", "--account", "JOBS")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"  JOBS {", `user: "executor-gpu"`, `"task.completed.gpu.>"`, `"task.completed.pdf.render"`, `"task.completed.pdf.merge"`,
		`user: "shop"`, `"task.submit-p0.order.>"`, `"ax.cmd.as.shop.cancel.>"`, `user: "alice"`, `user: "mirror"`, "$AX_PASSWORD_ALICE",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, `user: "executor-email"`) || strings.Contains(out, `user: "console"`) {
		t.Errorf("flags did not replace the sample's users:\n%s", out)
	}
	if code, _, errOut := run("--executor", "bad.cap"); code == 0 || !strings.Contains(errOut, "invalid capability") {
		t.Errorf("a bad capability: exit %d, %s", code, errOut)
	}

	// Events: narrowed for one producer, taken from another, granted to
	// an executor; operators publish any.
	code, out, errOut = run("--executor", "bill", "--producer", "psp", "--producer", "quiet", "--operator", "alice",
		"--event-subjects", "psp=payment.>,refund.*", "--event-subjects", "quiet=", "--event-subjects", "executor-bill=invoice.sent.*", "-o", "json")
	if code != 0 {
		t.Fatalf("--event-subjects: exit %d: %s", code, errOut)
	}
	var acct struct {
		Users []struct {
			Name    string
			Publish struct{ Allow []string }
		}
	}
	if err := json.Unmarshal([]byte(out), &acct); err != nil {
		t.Fatal(err)
	}
	events := map[string][]string{}
	for _, u := range acct.Users {
		events[u.Name] = []string{}
		for _, a := range u.Publish.Allow {
			if strings.HasPrefix(a, "ax.event.") {
				events[u.Name] = append(events[u.Name], a)
			}
		}
	}
	for user, want := range map[string][]string{
		"psp": {"ax.event.payment.>", "ax.event.refund.*"}, "quiet": {}, "executor-bill": {"ax.event.invoice.sent.*"},
		"alice": {"ax.event.>"}, "orchestrator": {"ax.event.>"}, "mirror": {},
	} {
		if !slices.Equal(events[user], want) {
			t.Errorf("%s may publish events %q, want %q", user, events[user], want)
		}
	}
	for _, bad := range [][]string{
		{"--event-subjects", "nobody=x.>"}, {"--event-subjects", "operator=x.>"}, {"--event-subjects", "producer"},
		{"--event-subjects", "producer=a b"},
	} {
		if code, _, errOut := run(bad...); code == 0 || errOut == "" {
			t.Errorf("%q: exit %d, %s; want refused", bad, code, errOut)
		}
	}
}
