package codec

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// AESGCMName is the "ax_codec" value of payloads AESGCM encodes.
const AESGCMName = "aes256gcm"

// KeySize is the size of an AES-256 key's secret, in bytes.
const KeySize = 32

// Key is an AES-256 key and the id that names it in the payloads it
// encrypts.
type Key struct {
	// ID names the key in encoded payloads: 1–64 of letters, digits, '_',
	// '-' and '.'. It is not secret.
	ID string
	// Secret is the key itself: KeySize (32) random bytes.
	Secret []byte
}

// keyIDPattern is what a key id may be.
var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,64}$`)

// AESGCM is a Codec that encrypts payloads with AES-256 in GCM mode: a
// random 96-bit nonce per payload, the key id bound to the ciphertext as
// additional data. It encrypts with its current key and decrypts with any
// key it holds, found by the id the payload names. Each payload is
// authenticated: one altered in any way, or encrypted under another
// secret with the same id, does not decode (ErrDecrypt). Rotate keys well
// before 2³² payloads per key (random nonces). It is safe for concurrent
// use.
type AESGCM struct {
	current string
	keys    map[string]cipher.AEAD
}

// NewAESGCM returns an AESGCM codec that encrypts with current and
// decrypts with current and every previous key (old keys kept for the
// payloads they encrypted). Key ids must be distinct.
func NewAESGCM(current Key, previous ...Key) (*AESGCM, error) {
	a := &AESGCM{current: current.ID, keys: make(map[string]cipher.AEAD, 1+len(previous))}
	for _, k := range append([]Key{current}, previous...) {
		if !keyIDPattern.MatchString(k.ID) {
			return nil, fmt.Errorf("key id %q: want 1–64 of letters, digits, '_', '-' and '.': %w", k.ID, ErrInvalidKey)
		}
		if _, dup := a.keys[k.ID]; dup {
			return nil, fmt.Errorf("key id %q given twice: %w", k.ID, ErrInvalidKey)
		}
		if len(k.Secret) != KeySize {
			return nil, fmt.Errorf("key %q: secret is %d bytes, want %d: %w", k.ID, len(k.Secret), KeySize, ErrInvalidKey)
		}
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k.ID, err)
		}
		a.keys[k.ID] = aead
	}
	return a, nil
}

// KeyID returns the id of the key new payloads are encrypted with.
func (a *AESGCM) KeyID() string { return a.current }

// envelope is an encoded payload on the wire.
type envelope struct {
	Codec string `json:"ax_codec"`
	Key   string `json:"key"`
	Data  string `json:"data"`
}

// additionalData binds a ciphertext to the codec and the key id it names.
func additionalData(keyID string) []byte { return []byte(AESGCMName + ":" + keyID) }

// Encode encrypts payload with the current key and returns
// {"ax_codec":"aes256gcm","key":<key id>,"data":<base64 of nonce, ciphertext and tag>}.
func (a *AESGCM) Encode(_ context.Context, payload []byte) ([]byte, error) {
	aead := a.keys[a.current]
	sealed := make([]byte, aead.NonceSize(), aead.NonceSize()+len(payload)+aead.Overhead())
	if _, err := rand.Read(sealed); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	sealed = aead.Seal(sealed, sealed, payload, additionalData(a.current))
	out, err := json.Marshal(envelope{Codec: AESGCMName, Key: a.current, Data: base64.StdEncoding.EncodeToString(sealed)})
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	return out, nil
}

// Decode decrypts a payload Encode produced, with the key its id names.
// A payload that is not an AESGCM envelope is an error wrapping
// ErrNotEncoded; a damaged one ErrMalformed; one naming a key the codec
// does not hold ErrUnknownKey; one that does not authenticate ErrDecrypt.
func (a *AESGCM) Decode(_ context.Context, encoded []byte) ([]byte, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(encoded, &members); err != nil {
		return nil, fmt.Errorf("want a JSON object with %q: %w", "ax_codec", ErrNotEncoded)
	}
	rawName, ok := members["ax_codec"]
	if !ok {
		return nil, fmt.Errorf("the object has no %q member: %w", "ax_codec", ErrNotEncoded)
	}
	var name string
	if err := json.Unmarshal(rawName, &name); err != nil {
		return nil, fmt.Errorf("%q is not a string: %w", "ax_codec", ErrMalformed)
	}
	if name != AESGCMName {
		return nil, fmt.Errorf("encoded by codec %q, not %s: %w", name, AESGCMName, ErrNotEncoded)
	}
	var env envelope
	if err := json.Unmarshal(encoded, &env); err != nil {
		return nil, fmt.Errorf("%s envelope: %v: %w", AESGCMName, err, ErrMalformed)
	}
	if env.Key == "" {
		return nil, fmt.Errorf("%s envelope names no key: %w", AESGCMName, ErrMalformed)
	}
	aead, ok := a.keys[env.Key]
	if !ok {
		return nil, fmt.Errorf("key %q (this codec holds %s): %w", env.Key, a.held(), ErrUnknownKey)
	}
	sealed, err := base64.StdEncoding.DecodeString(env.Data)
	if err != nil {
		return nil, fmt.Errorf("%s data is not base64: %v: %w", AESGCMName, err, ErrMalformed)
	}
	if len(sealed) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("%s data is %d bytes, shorter than a nonce and a tag: %w", AESGCMName, len(sealed), ErrMalformed)
	}
	n := aead.NonceSize()
	plain, err := aead.Open(nil, sealed[:n], sealed[n:], additionalData(env.Key))
	if err != nil {
		return nil, fmt.Errorf("with key %q (a different secret under that id, or an altered payload): %w", env.Key, ErrDecrypt)
	}
	return plain, nil
}

// held lists the key ids the codec holds, sorted.
func (a *AESGCM) held() string {
	ids := make([]string, 0, len(a.keys))
	for id := range a.keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return strings.Join(ids, ", ")
}

// ParseKeys reads a key file: one key per line, "<key id> <secret as
// standard base64>" (32 bytes, e.g. from `openssl rand -base64 32`); blank
// lines and lines starting with '#' are skipped. The first key is the
// current one: NewAESGCM(keys[0], keys[1:]...).
func ParseKeys(data []byte) ([]Key, error) {
	var keys []Key
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("key file line %d: want \"<key id> <base64 secret>\": %w", n, ErrInvalidKey)
		}
		secret, err := base64.StdEncoding.DecodeString(fields[1])
		if err != nil {
			return nil, fmt.Errorf("key file line %d: secret is not base64: %w", n, ErrInvalidKey)
		}
		if !keyIDPattern.MatchString(fields[0]) || len(secret) != KeySize {
			return nil, fmt.Errorf("key file line %d: want a key id of 1–64 of [A-Za-z0-9_.-] and a %d-byte secret: %w", n, KeySize, ErrInvalidKey)
		}
		keys = append(keys, Key{ID: fields[0], Secret: secret})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("key file holds no key: %w", ErrInvalidKey)
	}
	return keys, nil
}
