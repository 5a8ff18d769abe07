package codec

import "encoding/json"

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
	if len(payload) == 0 || payload[0] != '{' && !json.Valid(payload) {
		return "", "", false
	}
	if err := json.Unmarshal(payload, &env); err != nil || env.Codec == nil {
		return "", "", false
	}
	key, _ := env.Key.(string)
	return *env.Codec, key, true
}
