// Package clip shortens strings without splitting a UTF-8 character.
package clip

import "unicode/utf8"

// Bytes returns s cut to at most n bytes on a character boundary.
func Bytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
