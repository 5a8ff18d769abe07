// Package codec encodes task payloads before they leave a producer and
// decodes them in the executor, so the orchestrator, the MySQL mirror, the
// console and NATS itself only ever hold the encoded form: AX's payload
// codec, as Temporal's converter.PayloadCodec is Temporal's.
//
// A Codec is set on both ends: sdk.Client.Codec encodes every payload the
// client submits (Submit, SubmitMany, SubmitGraph, a Submitter's tasks and
// a schedule's template) and decodes the payloads it reads back;
// executor.Config.Codec decodes each task's payload before its handler sees
// Job.Payload (a payload that does not decode fails the attempt
// permanently) and encodes the shard payloads a planner returns. Nothing in
// between needs the key.
//
// # AES-256-GCM
//
// NewAESGCM is a ready-made Codec, built on the standard library only. It
// encrypts with its current key and decrypts with any key it holds, by the
// key id each encoded payload names, so keys rotate without re-encoding
// stored tasks:
//
//  1. give every executor the new key as a previous (decrypt-only) key;
//  2. make it the current key of the producers (and executors);
//  3. drop the old key once no task encoded with it is left to run.
//
// An encoded payload is a JSON object, so it is still a valid payload on
// the wire (task specs require JSON):
//
//	{"ax_codec":"aes256gcm","key":"k1","data":"<base64: nonce, ciphertext, tag>"}
//
// The exact form is in subjects.md ("Encoded payloads"). ParseKeys reads
// the key file `ax submit --codec-key-file` takes.
//
// # What is encoded
//
// Payloads only. Ids, types, priorities, dependencies, unique keys,
// errors, reasons and results stay in clear: the orchestrator needs most of
// them to schedule, and a handler that wants its result hidden encodes it
// itself (EncodePayload works on any JSON). An empty payload stays empty.
package codec
