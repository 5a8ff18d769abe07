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
