package codec_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ax-run/ax/axtest"
	"github.com/ax-run/ax/codec"
	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// Payload encryption end to end: the client encodes, the executor decodes,
// and what AX stores — read here by a client without the key, as the
// orchestrator, the mirror and the console read it — is the envelope.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// In production the secret comes from a key file or a secret store
	// (codec.ParseKeys); 32 random bytes.
	aes, err := codec.NewAESGCM(codec.Key{ID: "k1", Secret: bytes.Repeat([]byte{0x42}, codec.KeySize)})
	if err != nil {
		panic(err)
	}
	// axtest sets sdk.Client.Codec and executor.Config.Codec from one option.
	env, err := axtest.New(ctx, &axtest.Options{Codec: aes})
	if err != nil {
		panic(err)
	}
	defer func() { _ = env.Close(context.Background()) }()
	env.Executor.HandleFunc("card.charge", func(_ context.Context, j *executor.Job) (any, error) {
		fmt.Println("handler got:", string(j.Payload))
		return nil, nil
	})

	spec, _ := task.New("card.charge", map[string]string{"card": "4111 1111 1111 1111"})
	spec.ID = "charge-1"
	if _, err := env.Run(ctx, spec); err != nil {
		panic(err)
	}

	outsider, err := sdk.Connect(ctx, env.URL) // no Codec
	if err != nil {
		panic(err)
	}
	defer outsider.Close()
	stored, err := outsider.Get(ctx, "charge-1")
	if err != nil {
		panic(err)
	}
	var envelope map[string]string
	_ = json.Unmarshal(stored.Payload, &envelope)
	fmt.Println("stored:", envelope["ax_codec"], "key", envelope["key"], "card in clear:", strings.Contains(string(stored.Payload), "4111"))

	mine, _ := env.Client.Get(ctx, "charge-1") // the client with the codec decodes
	fmt.Println("read back:", string(mine.Payload))
	// Output:
	// handler got: {"card":"4111 1111 1111 1111"}
	// stored: aes256gcm key k1 card in clear: false
	// read back: {"card":"4111 1111 1111 1111"}
}

// Key rotation: the new key encrypts, the old one still decrypts what it
// encrypted.
func ExampleNewAESGCM() {
	ctx := context.Background()
	k1 := codec.Key{ID: "k1", Secret: bytes.Repeat([]byte{1}, codec.KeySize)}
	k2 := codec.Key{ID: "k2", Secret: bytes.Repeat([]byte{2}, codec.KeySize)}

	before, _ := codec.NewAESGCM(k1)
	old, _ := before.Encode(ctx, []byte(`{"n":1}`))

	after, _ := codec.NewAESGCM(k2, k1) // k2 current, k1 kept to decrypt
	clear, err := after.Decode(ctx, old)
	fmt.Println(string(clear), err)
	fresh, _ := after.Encode(ctx, []byte(`{"n":2}`))
	_, err = before.Decode(ctx, fresh)
	fmt.Println(err)
	// Output:
	// {"n":1} <nil>
	// key "k2" (this codec holds k1): payload encrypted with an unknown key
}

// A key file, as `ax submit --codec-key-file` reads it: the first key is
// the current one.
func ExampleParseKeys() {
	file := []byte(`# AX payload keys (openssl rand -base64 32)
k2 AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=
k1 AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=
`)
	keys, err := codec.ParseKeys(file)
	if err != nil {
		panic(err)
	}
	aes, err := codec.NewAESGCM(keys[0], keys[1:]...)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(keys), "keys; encrypting with", aes.KeyID())
	// Output: 2 keys; encrypting with k2
}
