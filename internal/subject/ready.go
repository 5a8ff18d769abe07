package subject

import "strings"

// ReadyParts returns the capability and priority of a
// task.ready.<capability>.p<N> subject.
func ReadyParts(subj string) (capability string, priority int, ok bool) {
	priority, ok = ReadyLevel(subj)
	if !ok {
		return "", 0, false
	}
	capability = strings.TrimPrefix(subj[:strings.LastIndex(subj, ".p")], readyPrefix)
	return capability, priority, capability != ""
}

// ParseReadyConsumer returns the capability and priority of a ready
// consumer's name (ax-ready-<capability>-p<N>).
func ParseReadyConsumer(name string) (capability string, priority int, ok bool) {
	rest, found := strings.CutPrefix(name, "ax-ready-")
	i := strings.LastIndex(rest, "-p")
	if !found || i <= 0 {
		return "", 0, false
	}
	priority, ok = ReadyLevel(readyPrefix + rest[:i] + ".p" + rest[i+2:])
	return rest[:i], priority, ok && ReadyConsumer(rest[:i], priority) == name
}
