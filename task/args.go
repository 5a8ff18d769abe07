package task

// Args is a payload type that names its task type, River style: submit a
// value with sdk.SubmitArgs and handle it with executor.HandleArgs, and the
// compiler keeps the payload's type and the task type together.
//
//	type Email struct{ To string `json:"to"` }
//
//	func (Email) Kind() string { return "email.send" }
//
// Kind must not depend on the value: it is called on the zero value to
// register the handler.
type Args interface {
	// Kind returns the task type.
	Kind() string
}
