package delivery

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
)

// A flight is one POST in the air. The handler that sends it waits up to
// Config.HandOff for the answer; a host that has not answered by then no
// longer holds the handler (a worker slot, shared by every delivery and
// import): the handler defers its row without spending an attempt and the
// flight goes on by itself, bounded by Config.MaxInFlight and the client's
// timeouts. When it lands, its outcome is recorded and applied to the
// host's health at once, and its row is made due again; the next run of
// the row takes the outcome from the flight instead of sending again. So
// waiting on remote hosts is bounded by sockets and memory, CPU work
// (signing, JSON, SQL) by the worker's handler slots and the cores.
type flight struct {
	eventID, host string
	probe         bool
	deadline      time.Time // clock time by which the flight has ended for sure
	done          chan struct{}

	// Set before done is closed.
	d      Decision
	status int
	wait   time.Time // a failed probe's next probe time
	err    error     // an interruption, returned as is

	// Lock order: a flight's mu before flights.mu.
	mu     sync.Mutex
	handed bool         // the handler stopped waiting; the row must be released
	landed atomic.Int64 // Unix ns when it landed; zero before
}

// States of courier_delivery_parked_total for deliveries waiting on flights.
const (
	// ParkedAwaitingAnswer: the host has a POST that outlasted HandOff; its
	// other deliveries wait for its answer.
	ParkedAwaitingAnswer = "awaiting_answer"
	// ParkedInFlightLimit: MaxInFlight POSTs were in the air.
	ParkedInFlightLimit = "in_flight_limit"
)

// flights are the POSTs in the air in this process, by delivery event id.
type flights struct {
	mu      sync.Mutex
	m       map[string]*flight
	suspect map[string]int // host -> handed flights not yet landed
	slots   chan struct{}  // MaxInFlight
	cpu     chan struct{}  // signing and encoding, one per core
	wg      sync.WaitGroup
	closed  bool // set under mu when Run ends: no flight is launched after
	ctx     context.Context
	cancel  context.CancelFunc
	// toRelease are landed, handed flights whose rows are to be made due.
	toRelease map[string]int // event id -> tries left
	senders   *goPool        // the goroutines flights run on
}

func newFlights(maxInFlight, cores int) *flights {
	ctx, cancel := context.WithCancel(context.Background())
	return &flights{m: map[string]*flight{}, suspect: map[string]int{}, slots: make(chan struct{}, maxInFlight),
		cpu: make(chan struct{}, max(cores, 1)), ctx: ctx, cancel: cancel, toRelease: map[string]int{}, senders: newGoPool()}
}

func (fs *flights) get(id string) *flight {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.m[id]
}

func (fs *flights) remove(id string) {
	fs.mu.Lock()
	delete(fs.m, id)
	fs.mu.Unlock()
}

// isSuspect reports whether host has a flight that outlasted the hand-off.
func (fs *flights) isSuspect(host string) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.suspect[host] > 0
}

// InFlight returns the POSTs in the air now and those of them whose
// handler stopped waiting.
func (s *Service) InFlight() (inFlight, handedOff int) {
	fs := s.flights
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, n := range fs.suspect {
		handedOff += n
	}
	return len(fs.slots), handedOff
}

// landed returns the outcome of a flight that ended: nil when the delivery
// is done, an outbox error otherwise (as deliver returns them).
func (s *Service) landed(f *flight) error {
	if f.err != nil {
		return f.err
	}
	switch f.d.Verdict {
	case Delivered:
		return nil
	case Permanent, Refused:
		return outbox.Permanent(&PermanentError{Status: f.status, Reason: f.d.Reason})
	}
	if !f.wait.IsZero() {
		// A failed probe: the host stays unavailable; wait for the next
		// probe without spending an attempt.
		return outbox.Defer(f.wait, "host "+f.host+" unavailable; probe failed: "+f.d.Reason)
	}
	return outbox.RetryAfter(&TransientError{Status: f.status, Reason: f.d.Reason}, f.d.RetryAfter)
}

// launch sends req as a flight for the delivery p of event ev. release
// frees the host's slot when the flight lands. It returns the flight, or
// false when MaxInFlight POSTs are in the air already.
func (s *Service) launch(ev outbox.Event, p Post, host string, probe bool, req *prepared, release func()) (*flight, bool) {
	fs := s.flights
	select {
	case fs.slots <- struct{}{}:
	default:
		return nil, false
	}
	f := &flight{eventID: ev.ID, host: host, probe: probe, done: make(chan struct{}),
		deadline: s.now().Add(s.cfg.Timeout + flightGrace)}
	fs.mu.Lock()
	if fs.closed {
		// Run is ending and waits for the flights in the air: adding one
		// now would race its wait. The row comes back later.
		fs.mu.Unlock()
		<-fs.slots
		return nil, false
	}
	fs.m[ev.ID] = f
	fs.wg.Add(1)
	fs.mu.Unlock()
	fs.senders.run(func() {
		defer fs.wg.Done()
		defer func() { <-fs.slots }()
		defer release()
		ctx := fs.ctx
		start := time.Now()
		status, header, postErr := s.sendLearning(ctx, host, req)
		took := time.Since(start)
		if postErr != nil && ctx.Err() != nil {
			f.err = fmt.Errorf("delivery: post to %s interrupted: %w", activitypub.RedactURL(p.Inbox), ctx.Err())
			s.finish(f)
			return
		}
		now := s.now()
		d := Classify(status, header, postErr, now, s.cfg.RetryAfterMax)
		f.wait = s.health.observe(ctx, host, ev.ID, d, probe, now)
		outcome := outcomeOf(d.Verdict)
		s.record(p, ev.ID, host, now, status, outcome, d.Reason, took)
		if c := s.channelOfType(ev.Type); c != nil {
			c.Attempted(outcome, status, took)
		} else {
			s.cfg.Metrics.Attempt(outcome, status, took)
		}
		if d.Gone && p.Recipient != "" {
			s.removeGone(ctx, p.Recipient)
		}
		if d.Verdict == Retry {
			s.log.DebugContext(ctx, "delivery: attempt failed", "event_id", ev.ID, "inbox", activitypub.RedactURL(p.Inbox), "host", host,
				"status", status, "err", d.Reason)
		}
		f.d, f.status = d, status
		s.finish(f)
	})
	return f, true
}

// goPool runs functions on goroutines it keeps for reuse: a POST grows its
// goroutine's stack (net/http, TLS) to several times the size a new
// goroutine starts with, and a goroutine per POST paid for that growth, a
// copy of the stack or two, on every delivery. A goroutine idle for
// senderIdle ends, and every one once stop is called; there is no other
// bound (the flights' slots bound the work).
type goPool struct {
	work     chan func() // unbuffered: a send succeeds only to an idle goroutine
	quit     chan struct{}
	stopOnce sync.Once
	started  atomic.Int64 // goroutines started
}

// senderIdle is how long a goroutine of a goPool waits for work.
const senderIdle = time.Minute

func newGoPool() *goPool { return &goPool{work: make(chan func()), quit: make(chan struct{})} }

// stop ends p's idle goroutines, and each busy one once its function
// returns.
func (p *goPool) stop() { p.stopOnce.Do(func() { close(p.quit) }) }

// run runs fn on an idle goroutine of p, or on a new one.
func (p *goPool) run(fn func()) {
	select {
	case p.work <- fn:
	default:
		p.started.Add(1)
		go p.loop(fn)
	}
}

func (p *goPool) loop(fn func()) {
	fn()
	idle := time.NewTimer(senderIdle)
	defer idle.Stop()
	for {
		select {
		case fn := <-p.work:
			fn()
			idle.Reset(senderIdle)
		case <-idle.C:
			return
		case <-p.quit:
			return
		}
	}
}

// flightGrace is added to Timeout for the deadline of a handed flight's
// row: by then the flight has landed (or the process died, and the row is
// retried).
const flightGrace = 5 * time.Second

// finish marks f landed. A handed flight's row is queued for release, and
// when its host answered, the host's deliveries waiting on it are released.
func (s *Service) finish(f *flight) {
	fs := s.flights
	f.mu.Lock()
	f.landed.Store(time.Now().UnixNano())
	close(f.done)
	handed := f.handed
	f.mu.Unlock()
	if !handed {
		return
	}
	fs.mu.Lock()
	if fs.suspect[f.host]--; fs.suspect[f.host] <= 0 {
		delete(fs.suspect, f.host)
	}
	fs.toRelease[f.eventID] = releaseTries
	fs.mu.Unlock()
	if f.err == nil && !f.d.HostDown && f.d.Verdict != Refused {
		// The host answered: what waited on it goes now.
		if _, err := s.queue.ReleaseTarget(fs.ctx, f.host); err != nil && fs.ctx.Err() == nil {
			s.log.WarnContext(fs.ctx, "delivery: release deliveries of answering host", "host", f.host, "err", err)
		}
	}
}

// releaseTries bounds how often a landed flight's row is looked for (every
// releaseEvery): the row may still be being settled as deferred.
const (
	releaseTries = 50
	releaseEvery = 100 * time.Millisecond
)

// await waits up to HandOff for f. It reports true when f landed; false
// when the handler stops waiting (the flight is handed off).
func (s *Service) await(ctx context.Context, f *flight) bool {
	t := time.NewTimer(s.cfg.HandOff)
	defer t.Stop()
	select {
	case <-f.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.done:
		return true
	default:
	}
	f.handed = true
	fs := s.flights
	fs.mu.Lock()
	fs.suspect[f.host]++
	fs.mu.Unlock()
	return false
}

// releaseLanded makes the rows of landed, handed flights due, and forgets
// landed flights nobody came back for.
func (s *Service) releaseLanded(ctx context.Context) {
	fs := s.flights
	fs.mu.Lock()
	ids := make([]string, 0, len(fs.toRelease))
	for id := range fs.toRelease {
		ids = append(ids, id)
	}
	fs.mu.Unlock()
	// One transaction releases them all: a handful land every tick when
	// hosts answer slowly, hundreds when a burst of them answers at once.
	released, err := s.queue.ReleaseEvents(ctx, ids)
	if err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "delivery: release landed deliveries", "deliveries", len(ids), "first_event_id", ids[0], "err", err)
	}
	fs.mu.Lock()
	for _, id := range ids {
		if released[id] || fs.toRelease[id] <= 1 {
			delete(fs.toRelease, id)
		} else {
			fs.toRelease[id]--
		}
	}
	fs.mu.Unlock()
	// A landed flight whose row never came back (discarded, or run
	// elsewhere) is dropped after its deadline and a minute.
	cutoff := time.Now().Add(-s.cfg.Timeout - flightGrace - time.Minute).UnixNano()
	fs.mu.Lock()
	for id, f := range fs.m {
		if at := f.landed.Load(); at != 0 && at < cutoff {
			delete(fs.m, id)
		}
	}
	fs.mu.Unlock()
}

// runFlights releases landed rows until ctx ends, then waits up to
// flightShutdown for flights in the air, cancels the rest and waits for
// them. Their rows come back at their deadline.
func (s *Service) runFlights(ctx context.Context) {
	t := time.NewTicker(releaseEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.flights.mu.Lock()
			s.flights.closed = true
			s.flights.mu.Unlock()
			done := make(chan struct{})
			go func() { s.flights.wg.Wait(); close(done) }()
			timer := time.NewTimer(flightShutdown)
			select {
			case <-done:
			case <-timer.C:
				s.flights.cancel()
				<-done
			}
			timer.Stop()
			s.flights.senders.stop()
			return
		case <-t.C:
			s.releaseLanded(ctx)
		}
	}
}

// flightShutdown is how long Run waits for POSTs in the air when it ends.
const flightShutdown = 10 * time.Second

// send POSTs req and reads up to MaxResponseBody of the answer. It returns
// the status and headers, or the transport error.
func (s *Service) send(req *http.Request) (int, http.Header, error) {
	return s.sendWith(s.client, req)
}

// sendWith is send with client c.
func (s *Service) sendWith(c *http.Client, req *http.Request) (int, http.Header, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, activitypub.RedactError(err) // its URL may carry a credential
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, s.cfg.MaxResponseBody))
	return resp.StatusCode, resp.Header, nil
}
