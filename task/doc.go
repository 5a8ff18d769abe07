// Package task is AX's task model: the spec a producer submits, the record the
// orchestrator keeps, the states a task moves through and the table of allowed
// transitions between them, and the messages exchanged on the wire.
//
// It is a leaf package with no I/O: the sdk, the orchestrator and the executor
// all share it, and subjects.md documents the JSON it produces.
//
// # Zero values
//
// The zero value of every Spec field means its documented default, in Go
// as in JSON (where the default applies to an absent field). Priority and
// MaxRetries are pointers because 0 is a meaningful value of theirs (the
// highest priority; no retry): set them with new(0) and read them with
// PriorityLevel and RetryLimit, which apply the defaults.
//
// # Example
//
// A complete program that builds a two-step graph, orders it as the
// orchestrator would and prints the JSON a producer sends:
//
//	package main
//
//	import (
//		"encoding/json"
//		"fmt"
//		"log"
//		"time"
//
//		"github.com/ax-run/ax/task"
//	)
//
//	func main() {
//		extract := task.Spec{ID: "extract-2026-11-30", Type: "etl.extract",
//			Payload: json.RawMessage(`{"day":"2026-11-30"}`), Timeout: task.Duration(30 * time.Minute)}
//		// Load at the highest priority, without retries, once extract succeeded.
//		load := task.Spec{ID: "load-2026-11-30", Type: "etl.load", DependsOn: []string{extract.ID},
//			Priority: new(0), MaxRetries: new(0)}
//		sorted, err := task.Graph{Tasks: []task.Spec{load, extract}}.Sorted(0)
//		if err != nil {
//			log.Fatal(err)
//		}
//		for _, s := range sorted {
//			wire, err := json.Marshal(s)
//			if err != nil {
//				log.Fatal(err)
//			}
//			fmt.Printf("p%d, %d retries: %s\n", s.PriorityLevel(), s.RetryLimit(), wire)
//		}
//	}
package task
