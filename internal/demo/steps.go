package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ax-run/ax/executor"
)

// TypeSteps runs durable steps (executor.Job.Step) and, optionally, a
// durable sleep (executor.Job.Sleep) between them: StepsParams.
const TypeSteps = "demo.steps"

// StepsParams is demo.steps' payload.
type StepsParams struct {
	// Steps is how many steps it runs ("step-1" …).
	Steps int `json:"steps"`
	// Work is how long it works after each step, outside any step (where
	// a kill lands most of the time), e.g. "20ms".
	Work string `json:"work,omitempty"`
	// Nap, when set, is a durable sleep after step NapAfter (default: the
	// middle step), e.g. "2s".
	Nap      string `json:"nap,omitempty"`
	NapAfter int    `json:"nap_after,omitempty"`
	// Ledger, when set, is a file each step's fn appends a line to
	// ("<task id> <step> <pid> <unix nanoseconds>"): a side effect outside
	// AX, to count how often each fn ran.
	Ledger string `json:"ledger,omitempty"`
	// Pad, when set, adds a last step "pad" whose result is a string of
	// that many bytes: over task.StepInlineLimit it is stored as an
	// object.
	Pad int `json:"pad,omitempty"`
}

func registerSteps(ex *executor.Executor) {
	ex.HandleFunc(TypeSteps, func(ctx context.Context, j *executor.Job) (any, error) {
		var p StepsParams
		if len(j.Payload) > 0 {
			if err := json.Unmarshal(j.Payload, &p); err != nil {
				return nil, executor.Permanent(fmt.Errorf("decode demo.steps payload: %w", err))
			}
		}
		napAfter := p.NapAfter
		if napAfter == 0 {
			napAfter = (p.Steps + 1) / 2
		}
		sum := 0
		for i := 1; i <= p.Steps; i++ {
			name := "step-" + strconv.Itoa(i)
			n, err := executor.Step(ctx, j, name, func(context.Context) (int, error) {
				if p.Ledger != "" {
					if err := appendLine(p.Ledger, fmt.Sprintf("%s %s %d %d\n", j.ID, name, os.Getpid(), time.Now().UnixNano())); err != nil {
						return 0, err
					}
				}
				return i * i, nil
			})
			if err != nil {
				return nil, err
			}
			sum += n
			if err := sleep(ctx, p.Work); err != nil {
				return nil, err
			}
			if p.Nap != "" && i == napAfter {
				d, err := time.ParseDuration(p.Nap)
				if err != nil {
					return nil, executor.Permanent(fmt.Errorf("nap %q: %w", p.Nap, err))
				}
				if err := j.Sleep(ctx, d); err != nil {
					return nil, err
				}
			}
		}
		out := map[string]any{"steps": p.Steps, "sum": sum, "executor_attempt": j.Attempt}
		if p.Pad > 0 {
			pad, err := executor.Step(ctx, j, "pad", func(context.Context) (string, error) { return strings.Repeat("p", p.Pad), nil })
			if err != nil {
				return nil, err
			}
			out["pad"] = len(pad)
		}
		return out, nil
	})
}

// appendLine appends one line to a file: one write(2) with O_APPEND, so
// lines of several processes never interleave.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
