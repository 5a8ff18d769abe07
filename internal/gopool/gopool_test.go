package gopool_test

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/gopool"
)

// goid is the calling goroutine's id, read off its stack trace's header.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// Every function runs once; a function given while a goroutine is idle
// runs on it; idle goroutines end after the keep time, or at Close.
func TestPool(t *testing.T) {
	p := gopool.New(time.Second)
	defer p.Close()
	var ran atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[uint64]bool{}
	for range 1000 {
		wg.Add(1)
		p.Go(func() {
			defer wg.Done()
			ran.Add(1)
			mu.Lock()
			seen[goid()] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	if ran.Load() != 1000 {
		t.Fatalf("ran %d of 1000", ran.Load())
	}
	ids := make(chan uint64, 1)
	reused := false
	for range 100 {
		p.Go(func() { ids <- goid() })
		if id := <-ids; seen[id] {
			reused = true
			break
		} else {
			seen[id] = true
		}
		time.Sleep(time.Millisecond)
	}
	if !reused {
		t.Fatalf("100 functions given one after another ran on %d goroutines, none reused", len(seen))
	}

	short := gopool.New(20 * time.Millisecond)
	before := runtime.NumGoroutine()
	done := make(chan struct{})
	short.Go(func() { close(done) })
	<-done
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if runtime.NumGoroutine() > before {
		t.Fatal("an idle goroutine outlived its keep time")
	}

	// Close ends the idle goroutines, and a busy one once it returns.
	quit := gopool.New(time.Hour)
	before = runtime.NumGoroutine()
	release := make(chan struct{})
	for range 10 {
		quit.Go(func() {})
	}
	quit.Go(func() { <-release })
	quit.Close()
	close(release)
	deadline = time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine() - before; n > 0 {
		t.Fatalf("%d goroutines left after Close", n)
	}
}
