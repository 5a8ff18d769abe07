package task

// LastAttempt is the number of the attempt that failed last: how many
// attempts the task's last series ran. The record keeps only the last
// KeepAttempts failures (Attempts), so their count is not it: a task that
// ran 6 times keeps 5. 0 when no attempt ran (a task that failed before
// one started, such as one nobody served within its dispatch timeout).
func (d DeadLetter) LastAttempt() int {
	n := 0
	for _, a := range d.Attempts {
		n = max(n, a.Attempt)
	}
	return n
}
