package codec_test

import (
	"context"
	"testing"

	"github.com/ax-run/ax/codec"
)

func TestEncoded(t *testing.T) {
	c, err := codec.NewAESGCM(codec.Key{ID: "k-2026", Secret: make([]byte, codec.KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := c.Encode(context.Background(), []byte(`{"to":"a@b.c"}`))
	if err != nil {
		t.Fatal(err)
	}
	if name, key, ok := codec.Encoded(enc); !ok || name != codec.AESGCMName || key != "k-2026" {
		t.Errorf("Encoded(AESGCM payload) = %q %q %v", name, key, ok)
	}
	for _, clear := range []string{``, `{"to":"a@b.c"}`, `[1,2]`, `"ax_codec"`, `{"ax_codec_x":"y"}`, `not json`} {
		if _, _, ok := codec.Encoded([]byte(clear)); ok {
			t.Errorf("Encoded(%s) says encoded", clear)
		}
	}
	if name, key, ok := codec.Encoded([]byte(`{"ax_codec":"vault","key":7}`)); !ok || name != "vault" || key != "" {
		t.Errorf("another codec's payload: %q %q %v", name, key, ok)
	}
}

// TestEncodedFindsTheMemberHoweverWritten: encoding/json matches a
// member's name regardless of case and after unescaping it, so the quick
// look that skips most payloads must not skip these.
func TestEncodedFindsTheMemberHoweverWritten(t *testing.T) {
	for _, enc := range []string{
		`{"ax_codec":"v"}`, `{"AX_CODEC":"v"}`, `{"Ax_Codec":"v"}`, `{"ax\u005fcodec":"v"}`, `{"\u0061x_codec":"v"}`,
		`{"n":"a_b","ax_codec":"v"}`, ` {"x":{"ax_codec":1},"ax_codec":"v"}`, "{\n\"ax_codec\" : \"v\"}",
	} {
		if name, _, ok := codec.Encoded([]byte(enc)); !ok || name != "v" {
			t.Errorf("Encoded(%s) = %q, %v; want v, true", enc, name, ok)
		}
	}
	for _, clear := range []string{`{"axcodec":"v"}`, `{"ax_code":"v"}`, `{"a":"ax_codec"}`, `{"x":{"ax_codec":"v"}}`, `_ax_codec`, `ax_codec`, `{"ax_codec":null}`} {
		if _, _, ok := codec.Encoded([]byte(clear)); ok {
			t.Errorf("Encoded(%s) says encoded", clear)
		}
	}
}
