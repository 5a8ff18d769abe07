package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// proc is one process the suite started: a NATS server, an orchestrator,
// or an adapter's executor or producer. Its stderr (and stdout, unless
// the caller reads it) goes to a log file in the test's directory.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // cmd.Wait's result, valid after done
	killed  bool          // stopped on purpose (kill -9)
	termed  bool          // stopped with SIGTERM (and checked then)
}

// startProc starts argv with env added to the suite's environment. With
// stdout non-nil the caller gets the process's stdout; otherwise it is
// logged.
func startProc(t *testing.T, dir, name string, argv, env []string, stdin bool) (*proc, io.WriteCloser, io.ReadCloser) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	var in io.WriteCloser
	if stdin {
		if in, err = cmd.StdinPipe(); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	log.Close()
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() { // owned by p: ends when the process exits
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, in, out
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill9 kills the process with SIGKILL and waits until it is gone.
func (p *proc) kill9(t *testing.T) {
	t.Helper()
	p.killed = true
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not die after SIGKILL", p.name)
	}
}

// term stops the process with SIGTERM (a graceful drain for an executor)
// and reports an error if it does not exit cleanly in time.
func (p *proc) term(wait time.Duration) error {
	if !p.alive() {
		if p.killed || p.termed {
			return nil
		}
		return fmt.Errorf("%s exited early: %v", p.name, p.err)
	}
	p.termed = true
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("%s exited with %v after SIGTERM, want a clean exit", p.name, p.err)
		}
		return nil
	case <-time.After(wait):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not exit within %s of SIGTERM", p.name, wait)
	}
}

// tail returns the last n lines of a log.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitLine reads lines from r until one satisfies ok (the rest of the
// output is copied to the log at logPath by a goroutine that ends with r).
func waitLine(ctx context.Context, p *proc, r io.Reader, ok func(string) bool) error {
	found := make(chan struct{})
	seen := false
	readLines(p, r, func(line []byte) {
		if !seen && ok(string(line)) {
			seen = true
			close(found)
		}
	})
	return waitReady(ctx, p, found)
}

// readLines copies each line of r to p's log and hands it to each, in a
// goroutine that ends when the process closes r.
func readLines(p *proc, r io.Reader, each func(line []byte)) {
	go func() {
		log, _ := os.OpenFile(p.logPath, os.O_WRONLY|os.O_APPEND, 0o644)
		defer log.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			fmt.Fprintf(log, "stdout: %s\n", sc.Text())
			each(sc.Bytes())
		}
	}()
}

// waitReady waits for ready, or says why p will not be.
func waitReady(ctx context.Context, p *proc, ready <-chan struct{}) error {
	select {
	case <-ready:
		return nil
	case <-p.done:
		return fmt.Errorf("%s exited before it was ready: %v\n%s", p.name, p.err, tail(p.logPath, 20))
	case <-ctx.Done():
		return fmt.Errorf("%s not ready: %w\n%s", p.name, ctx.Err(), tail(p.logPath, 20))
	}
}

// event is an adapter's handler event (Event).
type event = Event

// events collects the handlers' events of every scenario, in the order
// the suite received them (one publisher's messages keep their order).
type events struct {
	mu      sync.Mutex
	all     []event
	changed chan struct{}
}

func newEvents() *events { return &events{changed: make(chan struct{})} }

func (e *events) add(m *nats.Msg) {
	var ev event
	if json.Unmarshal(m.Data, &ev) != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
	close(e.changed)
	e.changed = make(chan struct{})
}

// of returns the events of one task, in order.
func (e *events) of(id string) []event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []event
	for _, ev := range e.all {
		if ev.ID == id {
			out = append(out, ev)
		}
	}
	return out
}

// await waits until an event matching ok arrived and returns it.
func (e *events) await(ctx context.Context, ok func(event) bool) (event, error) {
	for {
		e.mu.Lock()
		for _, ev := range e.all {
			if ok(ev) {
				e.mu.Unlock()
				return ev, nil
			}
		}
		ch := e.changed
		e.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return event{}, ctx.Err()
		}
	}
}

// producer is an adapter's producer process, answering one JSON request
// per line with one JSON reply per line (matched by seq).
type producer struct {
	p       *proc
	mu      sync.Mutex
	in      io.WriteCloser
	seq     int
	waiting map[int]chan map[string]json.RawMessage
}

func startProducer(ctx context.Context, t *testing.T, dir, name string, argv, env []string) (*producer, error) {
	p, in, out := startProc(t, dir, name, argv, env, true)
	pr := &producer{p: p, in: in, waiting: map[int]chan map[string]json.RawMessage{}}
	ready := make(chan struct{})
	first := true
	readLines(p, out, func(line []byte) {
		if first {
			first = false
			close(ready)
			return
		}
		var rep map[string]json.RawMessage
		if json.Unmarshal(line, &rep) != nil {
			return
		}
		var seq int
		_ = json.Unmarshal(rep["seq"], &seq)
		pr.mu.Lock()
		ch := pr.waiting[seq]
		delete(pr.waiting, seq)
		pr.mu.Unlock()
		if ch != nil {
			ch <- rep
		}
	})
	if err := waitReady(ctx, p, ready); err != nil {
		return nil, err
	}
	return pr, nil
}

// call sends a request and waits for its reply; a reply with "error" is
// returned as an error (the reply too).
func (pr *producer) call(ctx context.Context, req map[string]any) (map[string]json.RawMessage, error) {
	pr.mu.Lock()
	pr.seq++
	seq := pr.seq
	ch := make(chan map[string]json.RawMessage, 1)
	pr.waiting[seq] = ch
	req["seq"] = seq
	line, _ := json.Marshal(req)
	_, err := pr.in.Write(append(line, '\n'))
	pr.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("producer request: %w", err)
	}
	select {
	case rep := <-ch:
		if e, ok := rep["error"]; ok {
			var msg string
			_ = json.Unmarshal(e, &msg)
			return rep, errors.New(msg)
		}
		return rep, nil
	case <-pr.p.done:
		return nil, fmt.Errorf("producer exited: %v\n%s", pr.p.err, tail(pr.p.logPath, 20))
	case <-ctx.Done():
		return nil, fmt.Errorf("producer: no reply to %s: %w", line, ctx.Err())
	}
}

func (pr *producer) close() error {
	pr.in.Close()
	select {
	case <-pr.p.done:
		return pr.p.err
	case <-time.After(20 * time.Second):
		return pr.p.term(time.Second)
	}
}
