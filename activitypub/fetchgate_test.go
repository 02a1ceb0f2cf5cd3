package activitypub

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gateClock is a clock that moves only when told.
type gateClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *gateClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *gateClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// A remote whose documents take long to come, asked for them hundreds of
// times, holds PerHost fetches and no more: once a fetch from it has been
// in flight longer than SlowAfter every other fetch from it fails at once
// with ErrHostBusy, without reaching it, while fetches from other hosts go
// on; once it answered slowly it is left alone for SlowFor.
func TestFetchGateDoesNotWaitOnASlowHost(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var slowGets atomic.Int64
	actor := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ContentType)
		_, _ = w.Write([]byte(`{"@context":"https://www.w3.org/ns/activitystreams","id":"http://` + r.Host + r.URL.Path + `","type":"Person","inbox":"http://` + r.Host + `/inbox"}`))
	}
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slowGets.Add(1)
		<-release
		actor(w, r)
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	fast := httptest.NewServer(http.HandlerFunc(actor))
	t.Cleanup(fast.Close)

	clock := &gateClock{now: time.Now()}
	gate := NewFetchGate(FetchGateOptions{PerHost: 4, Now: clock.Now})
	key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFetcher(FetcherConfig{
		Client: NewClient(ClientOptions{AllowPrivate: true, Gate: gate}),
		Signer: Signer{KeyID: "https://courier.example/actor#main-key", Key: key},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	var first sync.WaitGroup
	firstErrs := make(chan error, 4)
	for range 4 {
		first.Go(func() {
			_, _, err := f.Fetch(ctx, slow.URL+"/users/slowpoke")
			firstErrs <- err
		})
	}
	deadline := time.Now().Add(15 * time.Second)
	for slowGets.Load() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d fetches reached the slow host, want 4", slowGets.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	clock.advance(6 * time.Second) // the four have now been in flight longer than SlowAfter

	var busy atomic.Int64
	var many sync.WaitGroup
	for range 300 {
		many.Go(func() {
			if _, _, err := f.Fetch(ctx, slow.URL+"/users/slowpoke"); errors.Is(err, ErrHostBusy) {
				busy.Add(1)
			} else {
				t.Errorf("fetch from the busy host: %v, want ErrHostBusy", err)
			}
		})
	}
	many.Wait()
	if busy.Load() != 300 || slowGets.Load() != 4 {
		t.Errorf("%d of 300 refused, %d requests reached the slow host; want 300 and 4", busy.Load(), slowGets.Load())
	}
	if _, _, err := f.Fetch(ctx, fast.URL+"/users/quick"); err != nil {
		t.Errorf("fetch from another host while one is slow: %v", err)
	}

	close(release)
	first.Wait()
	close(firstErrs)
	for err := range firstErrs {
		if err != nil {
			t.Errorf("a slow fetch: %v", err)
		}
	}
	if _, _, err := f.Fetch(ctx, slow.URL+"/users/slowpoke"); !errors.Is(err, ErrHostBusy) {
		t.Errorf("fetch right after slow answers: %v, want ErrHostBusy", err)
	}
	clock.advance(time.Minute + time.Second)
	if _, _, err := f.Fetch(ctx, slow.URL+"/users/slowpoke"); err != nil {
		t.Errorf("fetch after SlowFor: %v", err)
	}
	if n := slowGets.Load(); n != 5 {
		t.Errorf("the slow host got %d requests, want 5", n)
	}
}

// Hundreds of callers needing an actor whose host takes long to answer do
// not all wait on its one fetch: the caller that fetches waits, the others
// stop waiting after joinWait with ErrHostBusy, and Actor falls back to the
// stored copy.
func TestResolverCallersDoNotWaitOnASlowFetch(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var gets atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gets.Add(1) > 1 {
			<-release
		}
		w.Header().Set("Content-Type", ContentType)
		_, _ = w.Write([]byte(`{"@context":"https://www.w3.org/ns/activitystreams","id":"http://` + r.Host + r.URL.Path + `","type":"Person","inbox":"http://` + r.Host + `/inbox"}`))
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFetcher(FetcherConfig{
		Client: NewClient(ClientOptions{AllowPrivate: true}),
		Signer: Signer{KeyID: "https://courier.example/actor#main-key", Key: key},
	})
	if err != nil {
		t.Fatal(err)
	}
	clock := &gateClock{now: time.Now()}
	r, err := NewResolver(ResolverConfig{Fetcher: f, Store: newMemStore(), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := slow.URL + "/users/slowpoke"
	if _, err := r.Actor(ctx, id); err != nil { // stored, answered at once
		t.Fatal(err)
	}
	clock.advance(48 * time.Hour) // the stored copy is stale now

	refreshed := make(chan error, 1)
	go func() {
		_, err := r.Refresh(ctx, id)
		refreshed <- err
	}()
	deadline := time.Now().Add(15 * time.Second)
	for gets.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the refresh never reached the host")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var busy, stale atomic.Int64
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Go(func() {
			if i%2 == 0 {
				if _, err := r.Refresh(ctx, id); errors.Is(err, ErrHostBusy) {
					busy.Add(1)
				} else {
					t.Errorf("refresh while another is in flight: %v, want ErrHostBusy", err)
				}
				return
			}
			if a, err := r.Actor(ctx, id); err == nil && a.ID == id {
				stale.Add(1)
			} else {
				t.Errorf("actor while its refresh is in flight: %v", err)
			}
		})
	}
	wg.Wait() // would never end if the callers waited on the held fetch
	if busy.Load() != 150 || stale.Load() != 150 || gets.Load() != 2 {
		t.Errorf("%d busy, %d stale copies, %d requests; want 150, 150, 2", busy.Load(), stale.Load(), gets.Load())
	}
	close(release)
	if err := <-refreshed; err != nil {
		t.Errorf("the refresh itself: %v", err)
	}
}
