package task_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/ax-run/ax/task"
)

// The program of the package documentation: a literal's unset fields take
// their defaults (p2, 5 retries); new(0) asks for the highest priority and
// no retry.
func Example() {
	extract := task.Spec{ID: "extract-2026-11-30", Type: "etl.extract",
		Payload: json.RawMessage(`{"day":"2026-11-30"}`), Timeout: task.Duration(30 * time.Minute)}
	// Load at the highest priority, without retries, once extract succeeded.
	load := task.Spec{ID: "load-2026-11-30", Type: "etl.load", DependsOn: []string{extract.ID},
		Priority: new(0), MaxRetries: new(0)}
	sorted, err := task.Graph{Tasks: []task.Spec{load, extract}}.Sorted(0)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range sorted {
		wire, err := json.Marshal(s)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("p%d, %d retries: %s\n", s.PriorityLevel(), s.RetryLimit(), wire)
	}
	// Output:
	// p2, 5 retries: {"id":"extract-2026-11-30","type":"etl.extract","payload":{"day":"2026-11-30"},"timeout":"30m0s"}
	// p0, 0 retries: {"id":"load-2026-11-30","type":"etl.load","priority":0,"depends_on":["extract-2026-11-30"],"max_retries":0}
}

// DecodeSpec reads the wire form: absent fields take their defaults, and a
// wrong value is refused naming its field.
func ExampleDecodeSpec() {
	s, err := task.DecodeSpec([]byte(`{"id":"a1","type":"report.build"}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.PriorityLevel(), s.RetryLimit(), s.Timeout.Std(), s.Capability)

	_, err = task.DecodeSpec([]byte(`{"id":"a2","type":"report.build","timeout":"soon"}`))
	fmt.Println(err)

	bad := task.Spec{ID: "a3", Type: "report.build", Priority: new(9)}
	var verr *task.ValidationError
	if errors.As(bad.Validate(0), &verr) {
		fmt.Println(verr.Field, "-", verr.Reason)
	}
	// Output:
	// 2 5 10m0s default
	// decode task spec: field "timeout": duration "soon": time: invalid duration "soon"
	// priority - 9 is out of range 0..5
}

// Transitions reads the state table; CanTransition checks one move.
func ExampleTransitions() {
	fmt.Println(task.Transitions(task.Retrying))
	fmt.Println(task.CanTransition(task.Failed, task.Ready), task.CanTransition(task.Succeeded, task.Ready))
	// Output:
	// [ready retrying cancelled expired]
	// true false
}

// An order's shipment that an event on order.cancelled.<order> cancels
// wherever it is; a cancel_on is checked as a wait_for's subject and match.
func ExampleEventCancel() {
	ship, err := task.DecodeSpec([]byte(`{"id":"ship-42","type":"order.ship",
		"cancel_on":{"subject":"order.cancelled","match":"order-42"}}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ship.CancelOn.EventSubject(), ship.Validate(0))

	ship.CancelOn.Match = "order.42"
	fmt.Println(ship.Validate(0))
	// Output:
	// order.cancelled.order-42 <nil>
	// cancel_on: match "order.42" is not one token of 1-128 of [A-Za-z0-9_-]
}
