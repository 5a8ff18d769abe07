package cli

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/internal/testenv"
)

// daemonRun is a long-running command run in-process until the test ends.
type daemonRun struct {
	out, errOut syncBuffer
	cancel      context.CancelFunc
	done        chan int
}

func startCommand(t *testing.T, args ...string) *daemonRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemonRun{cancel: cancel, done: make(chan int, 1)}
	go func() { d.done <- Run(ctx, args, &d.out, &d.errOut) }()
	t.Cleanup(func() { d.stop(t) })
	return d
}

// stop cancels the command and checks it exited 0 (once).
func (d *daemonRun) stop(t *testing.T) {
	t.Helper()
	d.cancel()
	if code, ok := <-d.done; ok {
		close(d.done)
		if code != 0 {
			t.Errorf("command exited %d:\n%s\n%s", code, d.out.String(), d.errOut.String())
		}
	}
}

var (
	probeAddr = regexp.MustCompile(`serving /(?:metrics, /)?healthz and /readyz addr=(\S+)`)
	ansi      = regexp.MustCompile("\x1b\\[[0-9;]*m")
)

// probeURL waits for the command to log where it serves its probes.
func (d *daemonRun) probeURL(t *testing.T) string {
	t.Helper()
	var url string
	testenv.Eventually(t, 30*time.Second, "the probe address in the log", func() bool {
		if m := probeAddr.FindStringSubmatch(ansi.ReplaceAllString(d.errOut.String(), "")); m != nil {
			url = "http://" + m[1]
			return true
		}
		return false
	})
	return url
}

func probe(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitProbe waits until url answers code with a body holding every want.
func waitProbe(t *testing.T, url string, code int, want ...string) {
	t.Helper()
	var got int
	var body string
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, body = probe(t, url)
		ok := got == code
		for _, w := range want {
			ok = ok && strings.Contains(body, w)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %q, want %d with %q", url, got, body, code, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func healthcheck(url string) (int, string) {
	var out, errOut syncBuffer
	code := Run(context.Background(), []string{"healthcheck", url}, &out, &errOut)
	return code, out.String() + errOut.String()
}

// TestProbes runs the long-running commands against one NATS server and
// follows their readiness: an executor started before any orchestrator
// is alive but not ready (it waits for AX's streams); an orchestrator
// makes them and both become ready; a mirror whose MySQL is unreachable
// runs but is not ready; without NATS nothing is ready, everything alive,
// and they are ready again once it is back.
// ax healthcheck exits by the answer.
func TestProbes(t *testing.T) {
	t.Parallel()
	srv := testenv.BareNATS(t)
	common := []string{"--nats", srv.URL(), "--metrics-addr", "127.0.0.1:0", "--log-level", "info"}

	worker := startCommand(t, append([]string{"worker"}, common...)...)
	wURL := worker.probeURL(t)
	if code, body := probe(t, wURL+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("worker /healthz: %d %q", code, body)
	}
	waitProbe(t, wURL+"/readyz", http.StatusServiceUnavailable, "[+]nats ok", "[-]executor failed: starting")
	if code, out := healthcheck(wURL + "/readyz"); code != 1 || !strings.Contains(out, "503") {
		t.Fatalf("ax healthcheck of a worker waiting for the streams: exit %d, %s", code, out)
	}

	orch := startCommand(t, append([]string{"orchestrator"}, common...)...)
	oURL := orch.probeURL(t)
	waitProbe(t, oURL+"/readyz", 200, "[+]nats ok\n[+]orchestrator ok\nok\n")
	waitProbe(t, wURL+"/readyz", 200, "[+]executor ok")
	if code, out := healthcheck(wURL + "/readyz"); code != 0 || out != "ok\n" {
		t.Fatalf("ax healthcheck of a ready worker: exit %d, %s", code, out)
	}
	var jsonOut, jsonErr syncBuffer
	if code := Run(context.Background(), []string{"healthcheck", wURL + "/readyz", "-o", "json"}, &jsonOut, &jsonErr); code != 0 {
		t.Fatalf("ax healthcheck -o json of a ready worker: exit %d, %s", code, jsonErr.String())
	}
	checkJSONContract(t, "healthcheck", jsonOut.String())
	// metrics beside the probes
	if code, body := probe(t, oURL+"/metrics"); code != 200 || !strings.Contains(body, "ax_backlog_tasks") && !strings.Contains(body, "go_goroutines") {
		t.Fatalf("orchestrator /metrics: %d", code)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	mirror := startCommand(t, append([]string{"mirror", "--mysql-dsn", "root@tcp(" + closed + ")/ax"}, common...)...)
	mURL := mirror.probeURL(t)
	waitProbe(t, mURL+"/readyz", http.StatusServiceUnavailable, "[+]nats ok", "[+]mirror ok", "[-]mysql failed: writes to MySQL failing since")

	console := startCommand(t, "console", "--nats", srv.URL(), "--addr", "127.0.0.1:0", "--log-level", "warn")
	var cURL string
	testenv.Eventually(t, 30*time.Second, "ax console to print its URL", func() bool {
		if m := regexp.MustCompile(`AX console at (http://\S+)/`).FindStringSubmatch(console.out.String()); m != nil {
			cURL = m[1]
			return true
		}
		return false
	})
	waitProbe(t, cURL+"/readyz", 200, "[+]nats ok")
	waitProbe(t, cURL+"/healthz", 200, "ok")

	port, store := srv.Addr().(*net.TCPAddr).Port, srv.StoreDir()
	srv.Shutdown()
	srv.WaitForShutdown()
	for _, u := range []string{oURL, wURL, mURL, cURL} {
		waitProbe(t, u+"/readyz", http.StatusServiceUnavailable, "[-]nats failed: connection ")
		waitProbe(t, u+"/healthz", 200, "ok")
	}
	back, err := natsserver.Start(natsserver.Config{StoreDir: store, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(back.Stop)
	waitProbe(t, oURL+"/readyz", 200, "[+]nats ok\n[+]orchestrator ok\nok\n")
	waitProbe(t, wURL+"/readyz", 200, "[+]executor ok")
	console.stop(t)
	mirror.stop(t)
	orch.stop(t)
	worker.stop(t)
}

// TestProbesOfServerAndDev: ax server is ready once it accepts
// connections with JetStream; ax dev once its orchestrator and executors
// started.
func TestProbesOfServerAndDev(t *testing.T) {
	t.Parallel()
	server := startCommand(t, "server", "--port", "0", "--store", t.TempDir(), "--health-addr", "127.0.0.1:0", "--log-level", "info")
	waitProbe(t, server.probeURL(t)+"/readyz", 200, "[+]nats-server ok")

	dev := startCommand(t, "dev", "--port", "0", "--store", t.TempDir(), "--console-addr", "off", "--metrics-addr", "127.0.0.1:0")
	var url string
	testenv.Eventually(t, 60*time.Second, "ax dev to print its metrics URL", func() bool {
		if m := regexp.MustCompile(`metrics at (http://\S+)/metrics`).FindStringSubmatch(dev.out.String()); m != nil {
			url = m[1]
			return true
		}
		return false
	})
	waitProbe(t, url+"/readyz", 200, "[+]nats ok\n[+]orchestrator and executors ok\nok\n")
	// Ctrl-C from here on ends it cleanly (before, it may cut its set-up).
	testenv.Eventually(t, 60*time.Second, "ax dev to submit its workload", func() bool {
		return strings.Contains(dev.out.String(), "Submitted ")
	})
}
