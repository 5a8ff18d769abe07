package codec

import "errors"

// ErrNotEncoded is returned (wrapped) by Decode for a payload the codec did
// not encode: not a JSON object with an "ax_codec" member, or one naming
// another codec. AcceptClear passes such payloads through.
var ErrNotEncoded = errors.New("payload is not encoded")

// ErrMalformed is returned (wrapped) by Decode for an encoded payload that
// is damaged: a missing key id, data that is not base64, or too short.
var ErrMalformed = errors.New("malformed encoded payload")

// ErrUnknownKey is returned (wrapped) by Decode for a payload encrypted
// with a key id the codec does not hold.
var ErrUnknownKey = errors.New("payload encrypted with an unknown key")

// ErrDecrypt is returned (wrapped) by Decode when a payload does not
// authenticate under the key its id names: the key's secret differs from
// the one that encrypted it, or the payload was altered.
var ErrDecrypt = errors.New("payload does not decrypt")

// ErrInvalidKey is returned (wrapped) by NewAESGCM and ParseKeys for a key
// that cannot be used: a bad id, a secret that is not 32 bytes, or an id
// given twice.
var ErrInvalidKey = errors.New("invalid key")
