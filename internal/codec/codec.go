// Package codec encodes the messages AX exchanges with itself on the hot
// path — task events, dispatches, reports — as JSON, with a faster encoder
// than encoding/json (2–3× on a task event, the orchestrator's largest JSON
// cost). The bytes are the same JSON the wire contract (subjects.md)
// describes; submissions, CLI output and anything users write keep
// encoding/json and its error messages.
package codec

import gojson "github.com/goccy/go-json"

// Marshal encodes v as JSON.
func Marshal(v any) ([]byte, error) { return gojson.Marshal(v) }

// Unmarshal decodes JSON data into v.
func Unmarshal(data []byte, v any) error { return gojson.Unmarshal(data, v) }
