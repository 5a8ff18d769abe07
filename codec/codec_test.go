package codec_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/ax-run/ax/codec"
)

func key(t testing.TB, id string) codec.Key {
	t.Helper()
	secret := make([]byte, codec.KeySize)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	return codec.Key{ID: id, Secret: secret}
}

func newCodec(t testing.TB, current codec.Key, previous ...codec.Key) *codec.AESGCM {
	t.Helper()
	c, err := codec.NewAESGCM(current, previous...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var ctx = context.Background()

func TestAESGCMRoundTrip(t *testing.T) {
	t.Parallel()
	c := newCodec(t, key(t, "k1"))
	for _, payload := range []string{`{"card":"4111 1111 1111 1111"}`, `"secret"`, `42`, `[1,2,3]`, `null`, ``, strings.Repeat(`x`, 100_000)} {
		enc, err := c.Encode(ctx, []byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(enc) {
			t.Fatalf("encoded %q is not JSON: %s", payload, enc)
		}
		if len(payload) > 2 && bytes.Contains(enc, []byte(payload)) {
			t.Fatalf("encoded payload holds the clear payload: %s", enc)
		}
		var env map[string]string
		if err := json.Unmarshal(enc, &env); err != nil || env["ax_codec"] != "aes256gcm" || env["key"] != "k1" || env["data"] == "" || len(env) != 3 {
			t.Fatalf("envelope %s (%v): want ax_codec aes256gcm, key k1 and data", enc, err)
		}
		dec, err := c.Decode(ctx, enc)
		if err != nil {
			t.Fatal(err)
		}
		if string(dec) != payload {
			t.Fatalf("decoded %q, want %q", dec, payload)
		}
	}
}

// TestAESGCMNonceIsFresh: the same payload encrypts differently each time
// (a reused nonce would break GCM).
func TestAESGCMNonceIsFresh(t *testing.T) {
	t.Parallel()
	c := newCodec(t, key(t, "k1"))
	a, _ := c.Encode(ctx, []byte(`{"a":1}`))
	b, _ := c.Encode(ctx, []byte(`{"a":1}`))
	if bytes.Equal(a, b) {
		t.Fatalf("two encodings of one payload are equal: %s", a)
	}
}

// TestAESGCMSurvivesReformatting: the orchestrator may re-marshal a
// payload (sorted keys, other spacing); the envelope is read as JSON, not
// compared as bytes.
func TestAESGCMSurvivesReformatting(t *testing.T) {
	t.Parallel()
	c := newCodec(t, key(t, "k1"))
	enc, _ := c.Encode(ctx, []byte(`{"a":1}`))
	var v map[string]any
	if err := json.Unmarshal(enc, &v); err != nil {
		t.Fatal(err)
	}
	re, _ := json.MarshalIndent(v, "", "  ")
	if dec, err := c.Decode(ctx, re); err != nil || string(dec) != `{"a":1}` {
		t.Fatalf("decode of the re-marshalled envelope: %q, %v", dec, err)
	}
}

func TestAESGCMWrongKey(t *testing.T) {
	t.Parallel()
	enc, _ := newCodec(t, key(t, "k1")).Encode(ctx, []byte(`{"a":1}`))

	// The same id with another secret: the payload does not authenticate.
	_, err := newCodec(t, key(t, "k1")).Decode(ctx, enc)
	if !errors.Is(err, codec.ErrDecrypt) || !strings.Contains(err.Error(), `"k1"`) {
		t.Fatalf("decode with another secret under k1: %v, want ErrDecrypt naming k1", err)
	}
	// A codec without that id at all.
	_, err = newCodec(t, key(t, "k2"), key(t, "k3")).Decode(ctx, enc)
	if !errors.Is(err, codec.ErrUnknownKey) || !strings.Contains(err.Error(), `"k1" (this codec holds k2, k3)`) {
		t.Fatalf("decode without k1: %v, want ErrUnknownKey naming k1 and the keys held", err)
	}
}

func TestAESGCMTampered(t *testing.T) {
	t.Parallel()
	k1, k2 := key(t, "k1"), key(t, "k2")
	c := newCodec(t, k1, k2)
	enc, _ := c.Encode(ctx, []byte(`{"amount":100}`))
	var env map[string]string
	_ = json.Unmarshal(enc, &env)
	sealed, _ := base64.StdEncoding.DecodeString(env["data"])

	for i := range sealed { // every byte: nonce, ciphertext and tag
		bad := bytes.Clone(sealed)
		bad[i] ^= 0x01
		tampered, _ := json.Marshal(map[string]string{"ax_codec": "aes256gcm", "key": "k1", "data": base64.StdEncoding.EncodeToString(bad)})
		if _, err := c.Decode(ctx, tampered); !errors.Is(err, codec.ErrDecrypt) {
			t.Fatalf("byte %d flipped: %v, want ErrDecrypt", i, err)
		}
	}
	// The key id is bound to the ciphertext: relabelled, it does not decrypt.
	env["key"] = "k2"
	relabelled, _ := json.Marshal(env)
	if _, err := c.Decode(ctx, relabelled); !errors.Is(err, codec.ErrDecrypt) {
		t.Fatalf("relabelled key id: %v, want ErrDecrypt", err)
	}
	// Cut short.
	env["key"], env["data"] = "k1", base64.StdEncoding.EncodeToString(sealed[:len(sealed)-1])
	short, _ := json.Marshal(env)
	if _, err := c.Decode(ctx, short); !errors.Is(err, codec.ErrDecrypt) {
		t.Fatalf("truncated: %v, want ErrDecrypt", err)
	}
}

// TestAESGCMKeyRotation: payloads encrypted with an old key still decode
// once a new key is current; new payloads use the new key.
func TestAESGCMKeyRotation(t *testing.T) {
	t.Parallel()
	k1, k2 := key(t, "k1"), key(t, "k2")
	before := newCodec(t, k1)
	old, _ := before.Encode(ctx, []byte(`{"v":"old"}`))

	after := newCodec(t, k2, k1)
	if after.KeyID() != "k2" {
		t.Fatalf("KeyID = %q, want k2", after.KeyID())
	}
	if dec, err := after.Decode(ctx, old); err != nil || string(dec) != `{"v":"old"}` {
		t.Fatalf("old payload after rotation: %q, %v", dec, err)
	}
	fresh, _ := after.Encode(ctx, []byte(`{"v":"new"}`))
	if !bytes.Contains(fresh, []byte(`"key":"k2"`)) {
		t.Fatalf("new payload not under k2: %s", fresh)
	}
	if _, err := before.Decode(ctx, fresh); !errors.Is(err, codec.ErrUnknownKey) {
		t.Fatalf("a codec without k2: %v, want ErrUnknownKey", err)
	}
	// Step 1 of a rotation: executors hold k2 as a previous key first.
	executors := newCodec(t, k1, k2)
	if dec, err := executors.Decode(ctx, fresh); err != nil || string(dec) != `{"v":"new"}` {
		t.Fatalf("k2 held as a previous key: %q, %v", dec, err)
	}
}

func TestAESGCMMalformed(t *testing.T) {
	t.Parallel()
	c := newCodec(t, key(t, "k1"))
	for _, tc := range []struct {
		in   string
		want error
		says string
	}{
		{``, codec.ErrNotEncoded, "JSON object"},
		{`not json`, codec.ErrNotEncoded, "JSON object"},
		{`[1,2]`, codec.ErrNotEncoded, "JSON object"},
		{`"text"`, codec.ErrNotEncoded, "JSON object"},
		{`{"to":"a@b.c"}`, codec.ErrNotEncoded, `no "ax_codec"`},
		{`{"ax_codec":"gzip","data":"x"}`, codec.ErrNotEncoded, `codec "gzip"`},
		{`{"ax_codec":7}`, codec.ErrMalformed, "not a string"},
		{`{"ax_codec":"aes256gcm","data":"AAAA"}`, codec.ErrMalformed, "names no key"},
		{`{"ax_codec":"aes256gcm","key":"k1","data":"%%%"}`, codec.ErrMalformed, "not base64"},
		{`{"ax_codec":"aes256gcm","key":"k1","data":"AAAA"}`, codec.ErrMalformed, "shorter than a nonce and a tag"},
		{`{"ax_codec":"aes256gcm","key":"k1","data":5}`, codec.ErrMalformed, "envelope"},
		{`{"ax_codec":"aes256gcm","key":"k9","data":"AAAA"}`, codec.ErrUnknownKey, `"k9"`},
	} {
		_, err := c.Decode(ctx, []byte(tc.in))
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Decode(%s) = %v, want %v saying %q", tc.in, err, tc.want, tc.says)
		}
	}
}

func TestNewAESGCMRefusesBadKeys(t *testing.T) {
	t.Parallel()
	good := key(t, "k1")
	for name, keys := range map[string][]codec.Key{
		"empty id":     {{ID: "", Secret: good.Secret}},
		"id with ':'":  {{ID: "a:b", Secret: good.Secret}},
		"short secret": {{ID: "k1", Secret: good.Secret[:16]}},
		"no secret":    {{ID: "k1"}},
		"duplicate id": {good, key(t, "k1")},
	} {
		if _, err := codec.NewAESGCM(keys[0], keys[1:]...); !errors.Is(err, codec.ErrInvalidKey) {
			t.Errorf("%s: %v, want ErrInvalidKey", name, err)
		}
	}
}

func TestParseKeys(t *testing.T) {
	t.Parallel()
	k1, k2 := key(t, "k-2026.1"), key(t, "k0")
	file := "# AX payload keys: the first is current\n\n" +
		k1.ID + " " + base64.StdEncoding.EncodeToString(k1.Secret) + "\n" +
		"  " + k2.ID + "\t" + base64.StdEncoding.EncodeToString(k2.Secret) + "  \n"
	keys, err := codec.ParseKeys([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].ID != k1.ID || !bytes.Equal(keys[0].Secret, k1.Secret) || keys[1].ID != k2.ID || !bytes.Equal(keys[1].Secret, k2.Secret) {
		t.Fatalf("ParseKeys = %+v", keys)
	}
	for _, bad := range []string{"", "# only a comment\n", "k1\n", "k1 notbase64!\n", "k1 " + base64.StdEncoding.EncodeToString(k1.Secret[:31]) + "\n", "k:1 " + base64.StdEncoding.EncodeToString(k1.Secret) + "\n", "k1 a b\n"} {
		if _, err := codec.ParseKeys([]byte(bad)); !errors.Is(err, codec.ErrInvalidKey) {
			t.Errorf("ParseKeys(%q) = %v, want ErrInvalidKey", bad, err)
		}
	}
}

// badCodec returns what it was told to, for the helpers' checks.
type badCodec struct{ out string }

func (b badCodec) Encode(context.Context, []byte) ([]byte, error) { return []byte(b.out), nil }
func (b badCodec) Decode(context.Context, []byte) ([]byte, error) {
	return nil, errors.New("broken")
}

func TestPayloadHelpers(t *testing.T) {
	t.Parallel()
	c := newCodec(t, key(t, "k1"))
	// Nil codec and empty payloads pass through.
	for _, p := range []json.RawMessage{nil, {}} {
		if out, err := codec.EncodePayload(ctx, c, p); err != nil || len(out) != 0 {
			t.Fatalf("EncodePayload(%q) = %q, %v", p, out, err)
		}
		if out, err := codec.DecodePayload(ctx, c, p); err != nil || len(out) != 0 {
			t.Fatalf("DecodePayload(%q) = %q, %v", p, out, err)
		}
	}
	if out, err := codec.EncodePayload(ctx, nil, json.RawMessage(`{"a":1}`)); err != nil || string(out) != `{"a":1}` {
		t.Fatalf("EncodePayload without a codec = %q, %v", out, err)
	}
	enc, err := codec.EncodePayload(ctx, c, json.RawMessage(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if dec, err := codec.DecodePayload(ctx, c, enc); err != nil || string(dec) != `{"a":1}` {
		t.Fatalf("DecodePayload = %q, %v", dec, err)
	}
	if _, err := codec.DecodePayload(ctx, c, json.RawMessage(`{"a":1}`)); !errors.Is(err, codec.ErrNotEncoded) || !strings.HasPrefix(err.Error(), "decode payload: ") {
		t.Fatalf("DecodePayload of a clear payload: %v", err)
	}
	// A codec that breaks the JSON contract is caught at the producer.
	if _, err := codec.EncodePayload(ctx, badCodec{out: "\x00binary"}, json.RawMessage(`1`)); err == nil || !strings.Contains(err.Error(), "invalid JSON") {
		t.Fatalf("EncodePayload with a non-JSON codec: %v", err)
	}
}

func TestAcceptClear(t *testing.T) {
	t.Parallel()
	c := newCodec(t, key(t, "k1"))
	lenient := codec.AcceptClear(c)
	if out, err := lenient.Decode(ctx, []byte(`{"to":"a@b.c"}`)); err != nil || string(out) != `{"to":"a@b.c"}` {
		t.Fatalf("clear payload through AcceptClear: %q, %v", out, err)
	}
	enc, _ := lenient.Encode(ctx, []byte(`{"a":1}`))
	if out, err := lenient.Decode(ctx, enc); err != nil || string(out) != `{"a":1}` {
		t.Fatalf("encoded payload through AcceptClear: %q, %v", out, err)
	}
	// Only "not encoded" passes: a payload for a key it lacks still fails.
	other, _ := newCodec(t, key(t, "k2")).Encode(ctx, []byte(`{"a":1}`))
	if _, err := lenient.Decode(ctx, other); !errors.Is(err, codec.ErrUnknownKey) {
		t.Fatalf("unknown key through AcceptClear: %v", err)
	}
	if _, err := codec.AcceptClear(badCodec{}).Decode(ctx, []byte(`1`)); err == nil {
		t.Fatal("AcceptClear swallowed an error other than ErrNotEncoded")
	}
}

// TestAESGCMConcurrent: one codec shared by many goroutines (run with -race).
func TestAESGCMConcurrent(t *testing.T) {
	t.Parallel()
	c := newCodec(t, key(t, "k1"), key(t, "k0"))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				p := []byte(`{"i":` + string(rune('0'+i)) + `,"j":"` + strings.Repeat("x", j) + `"}`)
				enc, err := c.Encode(ctx, p)
				if err != nil {
					t.Error(err)
					return
				}
				if dec, err := c.Decode(ctx, enc); err != nil || !bytes.Equal(dec, p) {
					t.Errorf("round trip: %q, %v", dec, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// FuzzDecode: Decode of any input returns a payload or one of the
// documented errors, never panics; what Encode wrote always decodes.
func FuzzDecode(f *testing.F) {
	c := newCodec(f, codec.Key{ID: "k1", Secret: bytes.Repeat([]byte{7}, codec.KeySize)})
	enc, _ := c.Encode(ctx, []byte(`{"a":1}`))
	for _, seed := range []string{string(enc), `{}`, `{"ax_codec":"aes256gcm","key":"k1","data":"AAAA"}`, `[`, `null`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := c.Decode(ctx, in)
		if err != nil {
			for _, known := range []error{codec.ErrNotEncoded, codec.ErrMalformed, codec.ErrUnknownKey, codec.ErrDecrypt} {
				if errors.Is(err, known) {
					return
				}
			}
			t.Fatalf("Decode(%q): undocumented error %v", in, err)
		}
		// It decoded: it must have been a genuine envelope; encoding the
		// output again must round-trip.
		again, err := c.Encode(ctx, out)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := c.Decode(ctx, again); err != nil || !bytes.Equal(back, out) {
			t.Fatalf("re-encoded %q: %q, %v", out, back, err)
		}
	})
}
