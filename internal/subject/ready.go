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
