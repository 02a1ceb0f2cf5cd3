package delivery_test

import (
	"context"
	"errors"
	"github.com/courier-ap/courier/internal/testnet"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
)

// newDownRemote is a remote at an address the test holds from first to
// last (a port closed and listened on again could be taken by anything in
// between): until up, every connection to it is reset at once, as to a
// host that is down; hang makes it accept connections and answer nothing
// until cut, after which it is down again; up serves the remote there.
func newDownRemote(t *testing.T, keys *keyring, clock *testClock) (rm *remote, up func(), hang func() (cut func(), conns func() int)) {
	t.Helper()
	rm = &remote{t: t, keys: keys, clock: clock, getStatus: map[string]int{}}
	rm.srv = httptest.NewUnstartedServer(http.HandlerFunc(rm.serve))
	rm.srv.Listener.Close()
	h := &heldHost{ln: testnet.Listen(t), served: make(chan net.Conn), stopped: make(chan struct{})}
	rm.srv.Listener = &chanListener{addr: h.ln.Addr(), conns: h.served, done: h.stopped}
	rm.srv.URL = "http://" + h.ln.Addr().String()
	go h.accept()
	up = func() {
		rm.srv.URL = ""
		h.mode.Store(hostServing)
		rm.srv.Start()
		t.Cleanup(rm.srv.Close)
	}
	hang = func() (cut func(), conns func() int) {
		h.mode.Store(hostHanging)
		var once sync.Once
		cut = func() {
			once.Do(func() {
				h.mu.Lock()
				defer h.mu.Unlock()
				h.mode.Store(hostDown)
				for _, c := range h.hung {
					c.Close()
				}
			})
		}
		t.Cleanup(cut)
		conns = func() int {
			h.mu.Lock()
			defer h.mu.Unlock()
			return len(h.hung)
		}
		return cut, conns
	}
	return rm, up, hang
}

// What a heldHost does with a connection.
const (
	hostDown    = iota // reset at once
	hostHanging        // kept open, never answered
	hostServing        // handed to the HTTP server
)

type heldHost struct {
	ln     net.Listener
	mode   atomic.Int32
	served chan net.Conn
	// stopped is closed when the HTTP server closes its listener.
	stopped chan struct{}
	mu      sync.Mutex
	hung    []net.Conn
}

func (h *heldHost) accept() {
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.mu.Lock()
		switch h.mode.Load() {
		case hostDown:
			c.(*net.TCPConn).SetLinger(0) //nolint:errcheck // a reset, as from a closed port
			c.Close()
		case hostHanging:
			h.hung = append(h.hung, c)
		case hostServing:
			h.mu.Unlock()
			select {
			case h.served <- c:
			case <-h.stopped:
				c.Close()
			}
			continue
		}
		h.mu.Unlock()
	}
}

// chanListener is a net.Listener whose connections come from a channel.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *chanListener) Addr() net.Addr { return l.addr }

// process is a second delivery service on a pool of its own on the
// bundle's store, as another worker process on the same database is.
type process struct {
	svc *delivery.Service
	reg *outbox.Registry
}

func (b *bundle) otherProcess() *process {
	b.t.Helper()
	db := storetest.Open(b.t, b.loc, storetest.Options{Synchronous: "NORMAL"})
	cfg := b.cfg
	cfg.DB, cfg.Store = db, store.New(db, baseURL, b.clock.Now)
	svc, err := delivery.New(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	p := &process{svc: svc, reg: outbox.NewRegistry()}
	svc.Register(p.reg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = svc.Run(ctx)
	}()
	b.t.Cleanup(func() { cancel(); <-done })
	return p
}

// deliverWith runs the delivery handler of reg on ev, as a worker of that
// process would, and returns its outcome.
func (b *bundle) deliverWith(reg *outbox.Registry, ev outbox.Event) error {
	for _, h := range reg.Handlers(delivery.EventPost) {
		return h.Handler(b.ctx, ev)
	}
	b.t.Fatal("no delivery handler")
	return nil
}

// parked reports whether err defers a delivery because its host is
// unavailable.
func parked(err error) bool {
	var d *outbox.DeferError
	return errors.As(err, &d) && strings.Contains(d.Reason, "unavailable")
}

// TestHostHealthSharedByProcesses runs two delivery services, each on a
// pool of its own on one store, as two worker processes on one database,
// and delivers to a real loopback host that refuses connections, then
// serves. What one process learns of the host holds for the other's next
// delivery: its failures count on top of the other's, it parks once the
// other found the host unavailable, only one delivery of either probes it,
// and the answer to that probe releases the host for both.
func TestHostHealthSharedByProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *delivery.Config) {
		c.UnavailableAfter = time.Minute
		c.ProbeInterval = 5 * time.Minute
		c.ProbeMaxInterval = 10 * time.Minute
		c.ParkRecheck = 10 * time.Minute
		// The handler waits for the POST's outcome, however loaded the
		// machine: the probe's answer is held until the other deliveries
		// have been decided.
		c.Timeout, c.HandOff = time.Minute, time.Minute
	})
	a := &process{svc: b.svc, reg: b.reg}
	other := b.otherProcess()
	alice := b.actor("alice")
	rm, up, hang := newDownRemote(t, b.keys, b.clock)
	const inboxes = 8
	for i := range inboxes {
		rm.follow(b, alice, "f"+string(rune('a'+i)))
	}
	if err := b.handle(b.eventOf(b.note(alice, "to a host that is down"))); err != nil {
		t.Fatal(err)
	}
	var evs []outbox.Event
	for _, r := range b.rows(delivery.EventPost) {
		evs = append(evs, r.Event)
	}
	if len(evs) != inboxes {
		t.Fatalf("%d deliveries, want %d", len(evs), inboxes)
	}
	host := rm.Host()
	hostIn := func(p *process) delivery.HostStatus {
		t.Helper()
		st, err := p.svc.Health().Host(b.ctx, host)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	// One process finds the host down; the other's next delivery counts
	// its own failure on top.
	if err := b.deliverWith(a.reg, evs[0]); err == nil || parked(err) {
		t.Fatalf("first delivery to a down host: %v", err)
	}
	if st := hostIn(other); st.State != delivery.HostFailing || st.ConsecutiveFailures != 1 {
		t.Fatalf("the other process sees %s with %d failures", st.State, st.ConsecutiveFailures)
	}
	if err := b.deliverWith(other.reg, evs[1]); err == nil || parked(err) {
		t.Fatalf("second delivery to a down host: %v", err)
	}
	if st := hostIn(a); st.State != delivery.HostFailing || st.ConsecutiveFailures != 2 {
		t.Fatalf("the first process sees %s with %d failures, want failing with 2", st.State, st.ConsecutiveFailures)
	}

	// While failing, one delivery at a time, of either process, tries the
	// host. The host now accepts connections and answers nothing: the try
	// hangs until every other delivery has been decided (deferred on the
	// host's backoff, no attempt spent), then its connection is cut.
	hung, conns := hang()
	var (
		wg                sync.WaitGroup
		mu                sync.Mutex
		tries, waits, odd []error
	)
	for i, ev := range evs[3:] {
		p := a
		if i%2 == 1 {
			p = other
		}
		wg.Go(func() {
			err := b.deliverWith(p.reg, ev)
			mu.Lock()
			defer mu.Unlock()
			var d *outbox.DeferError
			switch {
			case errors.As(err, &d) && strings.Contains(d.Reason, "failing"):
				waits = append(waits, err)
			case err != nil && !errors.As(err, &d):
				tries = append(tries, err)
			default:
				odd = append(odd, err)
			}
		})
	}
	waitFor(t, "every delivery but the try decided", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(waits)+len(odd)+len(tries) >= len(evs[3:])-1
	})
	waitFor(t, "the try's connection", func() bool { return conns() >= 1 })
	hung()
	wg.Wait()
	if len(tries) != 1 || len(waits) != len(evs[3:])-1 || len(odd) != 0 || conns() != 1 {
		t.Fatalf("deliveries to a failing host: tries %v, %d deferred, others %v, %d connections; want one try",
			tries, len(waits), odd, conns())
	}
	if st := hostIn(other); st.State != delivery.HostFailing || st.ConsecutiveFailures != 3 {
		t.Fatalf("after the try: %s with %d failures, want failing with 3", st.State, st.ConsecutiveFailures)
	}

	// Past UnavailableAfter, a failure in the first process makes the host
	// unavailable; the other process parks its next delivery at once,
	// without a POST.
	b.clock.Advance(61 * time.Second)
	if err := b.deliverWith(a.reg, evs[2]); err == nil || parked(err) {
		t.Fatalf("third delivery to a down host: %v", err)
	}
	st := hostIn(other)
	if st.State != delivery.HostUnavailable || st.ConsecutiveFailures != 4 {
		t.Fatalf("the other process sees %s with %d failures, want unavailable with 4", st.State, st.ConsecutiveFailures)
	}
	for _, ev := range evs[3:] {
		if err := b.deliverWith(other.reg, ev); !parked(err) {
			t.Fatalf("delivery to an unavailable host in the other process: %v, want parked", err)
		}
	}
	if err := b.deliverWith(a.reg, evs[0]); !parked(err) {
		t.Fatalf("delivery to an unavailable host: %v, want parked", err)
	}

	// The host comes up, and holds its answer to the first POST until
	// every other delivery has been decided. Past the probe time and the
	// designated probe's grace, every delivery of both processes tries at
	// once: one claims the probe and POSTs, the others stay parked.
	answer := make(chan struct{})
	var answerOnce sync.Once
	release := func() { answerOnce.Do(func() { close(answer) }) }
	t.Cleanup(release)
	rm.setRespond(func(*http.Request) (int, http.Header) {
		<-answer
		return http.StatusAccepted, nil
	})
	up()
	b.clock.Advance(st.NextProbeAt.Sub(b.clock.Now()) + b.cfg.Timeout + 2*time.Minute)
	var (
		sent    []int
		parks   int
		unknown []error
	)
	for i, ev := range evs {
		p := a
		if i%2 == 1 {
			p = other
		}
		wg.Go(func() {
			err := b.deliverWith(p.reg, ev)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				sent = append(sent, i)
			case parked(err):
				parks++
			default:
				unknown = append(unknown, err)
			}
		})
	}
	waitFor(t, "every delivery but the probe parked", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return parks+len(unknown)+len(sent) >= inboxes-1
	})
	waitFor(t, "the probe's POST", func() bool { return rm.count() >= 1 })
	release()
	wg.Wait()
	if len(sent) != 1 || parks != inboxes-1 || len(unknown) != 0 || rm.count() != 1 {
		t.Fatalf("at probe time: delivered %v, %d parked, errors %v, %d POSTs; want one probe, the rest parked",
			sent, parks, unknown, rm.count())
	}

	// The probe's answer released the host for both processes: each sees
	// it healthy, and each delivers its next delivery at once.
	for _, p := range []*process{a, other} {
		if st := hostIn(p); st.State != delivery.HostHealthy || st.ConsecutiveFailures != 0 {
			t.Fatalf("after the probe: %s with %d failures", st.State, st.ConsecutiveFailures)
		}
	}
	for i, ev := range evs {
		if i == sent[0] {
			continue
		}
		p := a
		if i%2 == 0 {
			p = other // the other process than the one that parked it
		}
		if err := b.deliverWith(p.reg, ev); err != nil {
			t.Fatalf("delivery %d after recovery: %v", i, err)
		}
	}
	if rm.count() != inboxes {
		t.Fatalf("%d POSTs after recovery, want %d", rm.count(), inboxes)
	}
	waitFor(t, "parking cleared", func() bool {
		n, err := other.svc.Health().CountParked(b.ctx)
		return err == nil && n == 0
	})
}
