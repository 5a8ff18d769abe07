package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/scan"
	"github.com/ax-run/ax/internal/subject"
)

// poisonEntry is one message kept on AX_POISON.
type poisonEntry struct {
	Sequence   uint64    `json:"sequence"`
	Subject    string    `json:"subject"`
	Original   string    `json:"original_subject"`
	Reason     string    `json:"reason"`
	Deliveries string    `json:"deliveries"`
	At         time.Time `json:"at"`
	Bytes      int       `json:"bytes"`
	Data       string    `json:"data,omitempty"`
}

func poisonCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "poison",
		Short: "Messages an orchestrator could not apply after their delivery limit: list and re-drive them",
		Long: `An orchestrator retries a message whose handling fails with growing delays;
after its delivery limit (ax orchestrator --max-deliveries, 50) the message is
kept on AX_POISON with its original subject and the last error instead of
looping for ever. Fix the cause, then re-drive: the message is published
again on its original subject and removed from AX_POISON.`,
	}
	var limit int
	var withData bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List poison messages (oldest first)",
		Args:  cobra.NoArgs,
		RunE: g.withJetStream(func(ctx context.Context, js jetstream.JetStream, _ []string) error {
			entries, err := listPoison(ctx, js, limit, withData)
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(entries)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SEQ\tAT\tSUBJECT\tDELIVERIES\tBYTES\tREASON")
			for _, e := range entries {
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\n", e.Sequence, e.At.Format(time.RFC3339), e.Original, e.Deliveries, e.Bytes, e.Reason)
			}
			return w.Flush()
		}),
	}
	list.Flags().IntVar(&limit, "limit", 100, "most messages to show")
	list.Flags().BoolVar(&withData, "data", false, "include each message's body")
	var all bool
	redrive := &cobra.Command{
		Use:   "redrive [SEQ...]",
		Short: "Publish poison messages again on their original subjects (by sequence, or --all)",
		RunE: g.withJetStream(func(ctx context.Context, js jetstream.JetStream, args []string) error {
			var seqs []uint64
			for _, a := range args {
				n, err := strconv.ParseUint(a, 10, 64)
				if err != nil || n == 0 {
					return usageError(fmt.Errorf("%q is not a poison message's sequence (see ax poison list)", a))
				}
				seqs = append(seqs, n)
			}
			if all {
				entries, err := listPoison(ctx, js, 0, false)
				if err != nil {
					return err
				}
				for _, e := range entries {
					seqs = append(seqs, e.Sequence)
				}
			}
			if len(seqs) == 0 {
				return usageError(errors.New("name the sequences to re-drive, or --all"))
			}
			done := []uint64{}
			for _, seq := range seqs {
				if err := redrivePoison(ctx, js, seq); err != nil {
					return err
				}
				done = append(done, seq)
				if !g.jsonOutput() {
					fmt.Fprintf(g.stdout, "re-driven %d\n", seq)
				}
			}
			if g.jsonOutput() {
				return g.printJSON(map[string]any{"redriven": done})
			}
			return nil
		}),
	}
	redrive.Flags().BoolVar(&all, "all", false, "re-drive every poison message")
	cmd.AddCommand(list, redrive)
	return cmd
}

func listPoison(ctx context.Context, js jetstream.JetStream, limit int, withData bool) ([]poisonEntry, error) {
	st, err := js.Stream(ctx, subject.StreamPoison)
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", subject.StreamPoison, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", subject.StreamPoison, err)
	}
	entries := []poisonEntry{}
	if info.State.Msgs == 0 {
		return entries, nil
	}
	cons, done, err := scan.Open(ctx, js, subject.StreamPoison, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, err
	}
	defer done()
	for limit <= 0 || len(entries) < limit {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			return entries, fmt.Errorf("read %s: %w", subject.StreamPoison, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return entries, err
		}
		e := poisonEntry{Sequence: md.Sequence.Stream, Subject: msg.Subject(), Original: msg.Headers().Get(subject.HeaderPoisonSubject),
			Reason: msg.Headers().Get(subject.HeaderPoisonReason), Deliveries: msg.Headers().Get(subject.HeaderPoisonDeliveries),
			At: md.Timestamp, Bytes: len(msg.Data())}
		if withData {
			e.Data = string(msg.Data())
		}
		entries = append(entries, e)
		if md.Sequence.Stream >= info.State.LastSeq {
			break
		}
	}
	return entries, nil
}

// redrivePoison publishes a poison message again on its original subject
// (a JetStream publish, so it is stored before the copy is removed).
func redrivePoison(ctx context.Context, js jetstream.JetStream, seq uint64) error {
	st, err := js.Stream(ctx, subject.StreamPoison)
	if err != nil {
		return fmt.Errorf("bind %s: %w", subject.StreamPoison, err)
	}
	raw, err := st.GetMsg(ctx, seq)
	if err != nil {
		return fmt.Errorf("poison message %d: %w", seq, err)
	}
	orig := raw.Header.Get(subject.HeaderPoisonSubject)
	if orig == "" {
		return fmt.Errorf("poison message %d names no original subject", seq)
	}
	out := nats.NewMsg(orig)
	out.Data = raw.Data
	if _, err := js.PublishMsg(ctx, out); err != nil {
		return fmt.Errorf("re-drive %d to %s: %w", seq, orig, err)
	}
	if err := st.DeleteMsg(ctx, seq); err != nil {
		return fmt.Errorf("re-driven %d, but removing it from %s failed: %w", seq, subject.StreamPoison, err)
	}
	return nil
}
