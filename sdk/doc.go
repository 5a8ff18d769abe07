// Package sdk is AX's client: submit tasks and graphs (one at a time,
// pipelined with SubmitMany, or buffered with a Submitter), read their
// state and history, wait for them to end, cancel them, pause and resume
// task types, manage schedules and the dead-letter queue. Handlers run in
// package executor; package axtest runs a whole AX in a test.
//
// Typed submissions pair a payload type with its task type: SubmitArgs
// (River-style task.Args) and SubmitTyped are the producer's side of
// executor.HandleArgs and executor.HandleTyped.
//
// Payloads can be encrypted end to end: set Client.Codec (package codec)
// and the same codec in the executors' Config.Codec; AX then stores and
// carries only the encoded payloads.
//
// A Client is safe for concurrent use. The sdk pulls in no logging or
// metrics library.
//
// # Example
//
// A complete producer program:
//
//	package main
//
//	import (
//		"context"
//		"fmt"
//		"log"
//		"time"
//
//		"github.com/ax-run/ax/sdk"
//		"github.com/ax-run/ax/task"
//	)
//
//	func main() {
//		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
//		defer cancel()
//		c, err := sdk.Connect(ctx, "nats://127.0.0.1:4222")
//		if err != nil {
//			log.Fatal(err)
//		}
//		defer c.Close()
//
//		spec, err := task.New("email.send", map[string]string{"to": "a@example.com"})
//		if err != nil {
//			log.Fatal(err)
//		}
//		id, err := c.Submit(ctx, spec) // durable once it returns
//		if err != nil {
//			log.Fatal(err)
//		}
//		t, err := c.Wait(ctx, id) // succeeded, failed, cancelled or expired
//		if err != nil {
//			log.Fatal(err)
//		}
//		fmt.Println(t.State, string(t.Result))
//	}
package sdk
