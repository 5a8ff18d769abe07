package bench

import (
	"runtime"
	"syscall"
	"time"
)

// usage is what this process used so far: CPU time (user and system, every
// goroutine: orchestrators, executor, producer, observer and, when
// embedded, the server) and its peak resident memory.
type usage struct {
	cpu     time.Duration
	peakRSS uint64 // bytes
}

func processUsage() usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return usage{}
	}
	rss := uint64(ru.Maxrss)
	if runtime.GOOS != "darwin" {
		rss *= 1024 // kilobytes on Linux, bytes on macOS
	}
	return usage{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), peakRSS: rss}
}
