// Package leaderget reads a message from a replicated stream through its
// leader ($JS.API.STREAM.MSG.GET), as jetstream.Stream's GetMsg and
// GetLastMsgForSubject do, but keeps listening after an "unavailable"
// answer.
//
// Every server of a cluster receives a leader read. The stream's leader
// answers it; every other member that believes the stream (or the
// cluster's metadata) has no leader answers at once with 503 "JetStream
// system temporarily unavailable" (err_code 10008). A plain request takes
// the first answer, so while one member is wrong about the leader — a node
// restarted on its store, or just back from a partition, for as long as it
// has not heard from the leader — every client whose server is nearer to
// that member than to the leader is refused although the leader is
// answering. Chaos runs saw orchestrators refused this way for tens of
// seconds while a client on the leader's own server read fine. A Reader
// sends each read to an inbox of its own and, after a 10008, waits a little
// (Grace) for another server's answer before giving up.
package leaderget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Grace is how long a read waits for a better answer after a member said
// the stream has no leader: every server answers within about one round
// trip of the others, so the leader's answer, if there is a leader, comes
// well within it.
const Grace = 500 * time.Millisecond

// defaultTimeout bounds a read whose context has no deadline, as the
// jetstream package's default API timeout does.
const defaultTimeout = 5 * time.Second

// codeUnavailable is the err_code of "JetStream system temporarily
// unavailable" (the server's JSClusterNotAvailErr).
const codeUnavailable = 10008

// Reader sends leader reads on one connection. Its zero value is not
// usable: New. It is safe for concurrent use; its subscription ends with
// the connection.
type Reader struct {
	nc     *nats.Conn
	prefix string // the JetStream API prefix, ending in "."

	mu      sync.Mutex
	inbox   string // the subscription's subject without its last token
	sub     *nats.Subscription
	next    uint64
	pending map[string]chan *nats.Msg
}

// New returns a Reader for js's connection and API prefix (domain).
func New(js jetstream.JetStream) *Reader {
	return &Reader{nc: js.Conn(), prefix: apiPrefix(js.Options()), pending: make(map[string]chan *nats.Msg)}
}

// APIPrefix is the prefix of the API subjects of a JetStream context with
// options o (js.Options()), such as "$JS.API.".
func APIPrefix(o jetstream.JetStreamOptions) string { return apiPrefix(o) }

// apiPrefix is the prefix of js's API subjects, as the jetstream package
// computes it from a domain or an API prefix.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		if o.APIPrefix[len(o.APIPrefix)-1] != '.' {
			return o.APIPrefix + "."
		}
		return o.APIPrefix
	default:
		return jetstream.DefaultAPIPrefix
	}
}

// Last returns the last message of stream on subj, or jetstream.ErrMsgNotFound.
func (r *Reader) Last(ctx context.Context, stream, subj string) (*jetstream.RawStreamMsg, error) {
	return r.get(ctx, stream, getRequest{LastFor: subj})
}

// Seq returns the message of stream at seq, or jetstream.ErrMsgNotFound.
func (r *Reader) Seq(ctx context.Context, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	return r.get(ctx, stream, getRequest{Seq: seq})
}

type getRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
}

type getResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Subject  string    `json:"subject"`
		Sequence uint64    `json:"seq"`
		Header   []byte    `json:"hdrs,omitempty"`
		Data     []byte    `json:"data,omitempty"`
		Time     time.Time `json:"time"`
	} `json:"message,omitempty"`
}

func (r *Reader) get(ctx context.Context, stream string, req getRequest) (*jetstream.RawStreamMsg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultTimeout)
		defer cancel()
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	reply, answers, err := r.open()
	if err != nil {
		return nil, err
	}
	defer r.close(reply)
	if err := r.nc.PublishRequest(r.prefix+"STREAM.MSG.GET."+stream, reply, body); err != nil {
		return nil, fmt.Errorf("leader read on %s: %w", stream, err)
	}
	var unavailable error // the last 10008 answer, while waiting for a better one
	var grace <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if unavailable != nil {
				return nil, unavailable
			}
			return nil, ctx.Err()
		case <-grace:
			return nil, unavailable
		case m := <-answers:
			msg, err := decode(m)
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && apiErr.ErrorCode == codeUnavailable {
				if unavailable == nil {
					t := time.NewTimer(Grace)
					defer t.Stop()
					grace = t.C
				}
				unavailable = err
				continue
			}
			return msg, err
		}
	}
}

// decode turns one answer into the message or the error it carries.
func decode(m *nats.Msg) (*jetstream.RawStreamMsg, error) {
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return nil, nats.ErrNoResponders
	}
	var resp getResponse
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("decode a leader read's answer: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, resp.Error
	}
	if resp.Message == nil {
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	var hdr nats.Header
	if len(resp.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Header)
		if err != nil {
			return nil, fmt.Errorf("decode a leader read's headers: %w", err)
		}
		hdr = h
	}
	return &jetstream.RawStreamMsg{
		Subject:  resp.Message.Subject,
		Sequence: resp.Message.Sequence,
		Header:   hdr,
		Data:     resp.Message.Data,
		Time:     resp.Message.Time,
	}, nil
}

// open registers a reply subject and returns it with the channel its
// answers arrive on, subscribing the Reader's inbox on first use (and again
// if the subscription ended, say with a reconnect's failure).
func (r *Reader) open() (string, chan *nats.Msg, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub == nil || !r.sub.IsValid() {
		inbox := r.nc.NewInbox()
		sub, err := r.nc.Subscribe(inbox+".*", r.deliver)
		if err != nil {
			return "", nil, fmt.Errorf("subscribe a leader read inbox: %w", err)
		}
		r.inbox, r.sub = inbox, sub
	}
	r.next++
	reply := r.inbox + "." + strconv.FormatUint(r.next, 36)
	// Room for an answer from each server of a large cluster: deliver never
	// blocks, and drops what does not fit.
	ch := make(chan *nats.Msg, 8)
	r.pending[reply] = ch
	return reply, ch, nil
}

func (r *Reader) close(reply string) {
	r.mu.Lock()
	delete(r.pending, reply)
	r.mu.Unlock()
}

// deliver hands an answer to the read waiting for it; answers for a read
// that already returned are dropped.
func (r *Reader) deliver(m *nats.Msg) {
	r.mu.Lock()
	ch := r.pending[m.Subject]
	r.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- m:
	default:
	}
}

// Stream is a jetstream.Stream whose leader reads (a replicated stream,
// which does not allow direct gets) go through a Reader: GetMsg without
// options and GetLastMsgForSubject. Everything else, and every read of a
// stream that allows direct gets, is the wrapped stream's own.
type Stream struct {
	jetstream.Stream
	reader *Reader
}

// Wrap returns st with its leader reads sent through r (r's connection must
// be st's).
func Wrap(st jetstream.Stream, r *Reader) *Stream { return &Stream{Stream: st, reader: r} }

// leaderReads reports whether the stream, as last bound or refreshed, is
// read through its leader.
func (s *Stream) leaderReads() (string, bool) {
	info := s.CachedInfo()
	if info == nil {
		return "", false
	}
	return info.Config.Name, !info.Config.AllowDirect
}

// GetLastMsgForSubject returns the stream's last message on subj.
func (s *Stream) GetLastMsgForSubject(ctx context.Context, subj string) (*jetstream.RawStreamMsg, error) {
	if name, ok := s.leaderReads(); ok {
		return s.reader.Last(ctx, name, subj)
	}
	return s.Stream.GetLastMsgForSubject(ctx, subj)
}

// GetMsg returns the stream's message at seq; with options (a subject
// filter), as the wrapped stream reads it.
func (s *Stream) GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	if name, ok := s.leaderReads(); ok && len(opts) == 0 {
		return s.reader.Seq(ctx, name, seq)
	}
	return s.Stream.GetMsg(ctx, seq, opts...)
}

// KV is a jetstream.KeyValue whose Get goes through a Reader when its
// stream is read through its leader (AX turns direct gets off on every
// bucket: internal/topology). Everything else is the wrapped bucket's own.
type KV struct {
	jetstream.KeyValue
	stream string // KV_<bucket>
	prefix string // $KV.<bucket>.
	leader bool
	reader *Reader
}

// BindKV binds the bucket of js with its reads through r (r's connection
// must be js's).
func BindKV(ctx context.Context, js jetstream.JetStream, bucket string, r *Reader) (*KV, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, err
	}
	return &KV{KeyValue: kv, stream: st.CachedInfo().Config.Name, prefix: "$KV." + bucket + ".",
		leader: !st.CachedInfo().Config.AllowDirect, reader: r}, nil
}

// Get returns the latest entry for key, as jetstream.KeyValue's Get does:
// ErrKeyNotFound for none and for a deleted or purged key.
func (kv *KV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if !kv.leader {
		return kv.KeyValue.Get(ctx, key)
	}
	if !validKey(key) {
		return nil, jetstream.ErrInvalidKey
	}
	m, err := kv.reader.Last(ctx, kv.stream, kv.prefix+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, jetstream.ErrKeyNotFound
	}
	if err != nil {
		return nil, err
	}
	// A delete or purge marker (or a marker of the server's own) is no
	// entry, as for jetstream's Get.
	if m.Header.Get("KV-Operation") != "" || m.Header.Get(jetstream.MarkerReasonHeader) != "" {
		return nil, jetstream.ErrKeyNotFound
	}
	return &entry{bucket: kv.Bucket(), key: key, value: m.Data, revision: m.Sequence, created: m.Time}, nil
}

// entry is a KV entry read through a Reader.
type entry struct {
	bucket, key string
	value       []byte
	revision    uint64
	created     time.Time
}

func (e *entry) Bucket() string                  { return e.bucket }
func (e *entry) Key() string                     { return e.key }
func (e *entry) Value() []byte                   { return e.value }
func (e *entry) Revision() uint64                { return e.revision }
func (e *entry) Created() time.Time              { return e.created }
func (e *entry) Delta() uint64                   { return 0 }
func (e *entry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// validKey is jetstream's rule for a key: letters, digits and -/_=. only,
// not starting or ending with a dot.
func validKey(key string) bool {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' {
		return false
	}
	for _, c := range []byte(key) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-' || c == '/' || c == '_' || c == '=' || c == '.':
		default:
			return false
		}
	}
	return true
}
