package subject

// HeaderTraceParent carries a W3C trace context (traceparent) on a
// submission and on a dispatch, so a producer's trace follows its task.
const HeaderTraceParent = "traceparent"
