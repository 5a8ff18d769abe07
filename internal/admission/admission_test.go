package admission

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/ax-run/ax/task"
)

type fake struct {
	name    string
	applies bool
	verdict Verdict
	err     error
	asked   *[]string
}

func (f fake) Name() string            { return f.name }
func (f fake) Applies(*task.Task) bool { return f.applies }
func (f fake) Admit(_ context.Context, tk *Ticket) (Verdict, error) {
	*f.asked = append(*f.asked, f.name)
	tk.Task.Reason += f.name
	return f.verdict, f.err
}

// TestChain: admitters are asked in order, only where they apply; the
// first that holds or queues decides; an error names its admitter.
func TestChain(t *testing.T) {
	var asked []string
	c := Chain{
		fake{name: "a", applies: true, verdict: Admit, asked: &asked},
		fake{name: "b", applies: false, verdict: Hold, asked: &asked},
		fake{name: "c", applies: true, verdict: Queue, asked: &asked},
		fake{name: "d", applies: true, verdict: Hold, asked: &asked},
	}
	tk := &Ticket{}
	v, err := c.Admit(context.Background(), tk)
	if v != Queue || err != nil || !slices.Equal(asked, []string{"a", "c"}) || tk.Task.Reason != "ac" {
		t.Errorf("got %s %v, asked %v, reason %q", v, err, asked, tk.Task.Reason)
	}
	if !c.Applies(&task.Task{}) || (Chain{c[1]}).Applies(&task.Task{}) || (Chain{}).Applies(&task.Task{}) {
		t.Error("Applies")
	}
	asked = nil
	if v, err := (Chain{c[0], c[1]}).Admit(context.Background(), &Ticket{}); v != Admit || err != nil {
		t.Errorf("all admit: %s %v", v, err)
	}
	boom := errors.New("boom")
	if _, err := (Chain{fake{name: "slots", applies: true, err: boom, asked: &asked}}).Admit(context.Background(), &Ticket{}); !errors.Is(err, boom) || err.Error() != "slots: boom" {
		t.Errorf("error: %v", err)
	}
}
