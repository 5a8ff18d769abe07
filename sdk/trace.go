package sdk

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/tracing"
)

// submission is a submission message carrying the trace context of ctx's
// span (a W3C traceparent header) when it has one, so the task joins the
// producer's trace.
func submission(ctx context.Context, subj string, data []byte) *nats.Msg {
	msg := &nats.Msg{Subject: subj, Data: data}
	if tp := tracing.TraceParent(ctx); tp != "" {
		msg.Header = nats.Header{subject.HeaderTraceParent: []string{tp}}
	}
	return msg
}
