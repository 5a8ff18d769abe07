package cli

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/ax-run/ax/codec"
)

// addCodecFlag binds --codec-key-file, the AES-256-GCM keys a command
// encodes or decodes payloads with.
func addCodecFlag(f *pflag.FlagSet, path *string) {
	f.StringVar(path, "codec-key-file", "", `encrypt payloads with AES-256-GCM: a file of "<key id> <base64 32-byte key>" lines, the first current (see package codec)`)
}

// loadCodec reads a key file into an AES-256-GCM codec; an empty path
// means no codec.
func loadCodec(path string) (codec.Codec, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("codec key file: %w", err)
	}
	keys, err := codec.ParseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("codec key file %s: %w", path, err)
	}
	c, err := codec.NewAESGCM(keys[0], keys[1:]...)
	if err != nil {
		return nil, fmt.Errorf("codec key file %s: %w", path, err)
	}
	return c, nil
}
