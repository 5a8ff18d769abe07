package codec

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Encoded tells whether payload is in an encoded form: a JSON object with
// an "ax_codec" member naming its codec (AESGCMName for AESGCM), and the
// key id its "key" member names ("" without one). A reader without the
// codec uses it to refuse an encoded payload instead of taking its
// ciphertext for the payload (an executor without Config.Codec fails such
// a task, naming the key).
func Encoded(payload []byte) (codecName, keyID string, ok bool) {
	var env struct {
		Codec *string `json:"ax_codec"`
		Key   any     `json:"key"`
	}
	if len(payload) == 0 || !mayName(payload, codecMember) || payload[0] != '{' && !json.Valid(payload) {
		return "", "", false
	}
	if err := json.Unmarshal(payload, &env); err != nil || env.Codec == nil {
		return "", "", false
	}
	key, _ := env.Key.(string)
	return *env.Codec, key, true
}

const codecMember = "ax_codec"

// mayName reports whether data may hold a member named name (ASCII, with
// an underscore, and no letter with a non-ASCII case fold): as
// encoding/json matches names regardless of case, and a name may be
// written with escapes. False means it certainly does not, without
// decoding anything — most payloads, at the cost of a scan for a byte.
func mayName(data []byte, name string) bool {
	if bytes.IndexByte(data, '\\') >= 0 {
		return true
	}
	at := strings.IndexByte(name, '_')
	for i := 0; ; {
		j := bytes.IndexByte(data[i:], '_')
		if j < 0 {
			return false
		}
		start := i + j - at
		if start >= 0 && start+len(name) <= len(data) && bytes.EqualFold(data[start:start+len(name)], []byte(name)) {
			return true
		}
		i += j + 1
	}
}
