package jspub_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/jspub"
	"github.com/ax-run/ax/internal/testenv"
)

// PublishMsg answers as jetstream's PublishMsg does: the acknowledgement
// of a stored message (with its duplicate flag), the API error of a
// refused compare-and-set, and ErrNoStreamResponse with no stream.
func TestPublishMsg(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PUB", Subjects: []string{"pub.>"}}); err != nil {
		t.Fatal(err)
	}
	msg := func(expect string) *nats.Msg {
		m := nats.NewMsg("pub.a")
		m.Data = []byte("x")
		m.Header.Set(jetstream.MsgIDHeader, "one")
		if expect != "" {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, expect)
		}
		return m
	}
	ack, err := jspub.PublishMsg(context.Background(), nc, msg("0"))
	if err != nil || ack.Stream != "PUB" || ack.Sequence != 1 || ack.Duplicate {
		t.Fatalf("first publish: %+v %v", ack, err)
	}
	ack, err = jspub.PublishMsg(ctx, nc, msg(""))
	if err != nil || ack.Sequence != 1 || !ack.Duplicate {
		t.Fatalf("duplicate publish: %+v %v", ack, err)
	}
	m := msg("0")
	m.Header.Del(jetstream.MsgIDHeader)
	_, err = jspub.PublishMsg(ctx, nc, m)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("stale compare-and-set: %v, want wrong last sequence", err)
	}
	m.Subject = "nowhere"
	if _, err := jspub.PublishMsg(ctx, nc, m); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("publish to no stream: %v", err)
	}
}
