package delivery

import (
	"sync"
	"testing"
)

// A goPool runs functions one after another on the goroutine that ran the
// first, runs functions given at once on goroutines of their own, and after
// stop still runs what it is given.
func TestGoPoolReusesGoroutines(t *testing.T) {
	p := newGoPool()
	done := make(chan struct{})
	p.run(func() { done <- struct{}{} })
	<-done
	// The goroutine that ran the first function takes the next ones: a
	// send on the unbuffered work channel is received only by a pooled
	// goroutine waiting for work.
	for range 100 {
		p.work <- func() { done <- struct{}{} }
		<-done
	}
	if n := p.started.Load(); n != 1 {
		t.Fatalf("101 functions one after another started %d goroutines, want 1", n)
	}

	before := p.started.Load()
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 20 {
		wg.Add(1)
		p.run(func() { defer wg.Done(); <-release })
	}
	if n := p.started.Load() - before; n < 19 {
		t.Fatalf("20 functions at once ran on %d new goroutines, want 19 or 20 (one may be the idle one)", n)
	}
	close(release)
	wg.Wait()

	p.stop()
	p.stop() // twice is fine
	ran := make(chan struct{})
	p.run(func() { close(ran) })
	<-ran
}
