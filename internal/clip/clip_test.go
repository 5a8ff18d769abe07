package clip

import "testing"

func TestBytes(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exact", 5, "exact"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"},   // é is 2 bytes: not split
		{"aéb", 3, "aé"}, // cut after it
		{"日本", 4, "日"},
		{"abc", 0, ""},
		{"abc", -1, ""},
	} {
		if got := Bytes(c.s, c.n); got != c.want {
			t.Errorf("Bytes(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
