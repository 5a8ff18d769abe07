package task

// Codes of a refused command's reply (CommandReply.Code).
const (
	// ReplyNotFound: the task or schedule the command names does not exist.
	ReplyNotFound = "not_found"
	// ReplyConflict: what it names is in no state for it (cancel a task
	// that ended, re-drive one that did not fail, set a limit beyond the
	// most kept).
	ReplyConflict = "conflict"
	// ReplyInvalid: the command is malformed (an unknown kind, a bad
	// schedule, limit or pause scope).
	ReplyInvalid = "invalid"
)
