package delivery_test

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// note publishes a public note of a to its followers and returns its Create.
func (b *bundle) note(a *store.Actor, text string) *store.Activity {
	b.t.Helper()
	act, _, err := notetest.Create(b.ctx, b.st, a, notetest.Input{Content: text,
		To: []string{activitypub.Public}, CC: []string{b.st.URIs().Followers(a.Name)}})
	if err != nil {
		b.t.Fatal(err)
	}
	return act
}

// waitHost waits until host's recorded state is want and returns it.
func (b *bundle) waitHost(host, want string) delivery.HostStatus {
	b.t.Helper()
	var st delivery.HostStatus
	waitFor(b.t, "host "+host+" "+want, func() bool {
		var err error
		st, err = b.svc.Health().Host(b.ctx, host)
		return err == nil && st.State == want
	})
	return st
}

// waitDelivered waits until a delivery row is done; its callers deliver to
// one inbox.
func (b *bundle) waitDelivered(what string) {
	b.t.Helper()
	waitFor(b.t, what, func() bool {
		for _, r := range b.deliveryRows() {
			return r.Status == outbox.StatusDone
		}
		return false
	})
}

// settledRows waits until n delivery rows exist and none is claimed or due
// on the test clock, then returns them by inbox (the latest row of each).
func (b *bundle) settledRows(n int) map[string]outbox.Row {
	b.t.Helper()
	var rows map[string]outbox.Row
	deadline := time.Now().Add(14 * time.Second)
	waitFor(b.t, "delivery rows to settle", func() bool {
		all := b.rows(delivery.EventPost)
		if time.Now().After(deadline) {
			for _, r := range all {
				b.t.Logf("%s: %s attempts %d next +%s err %q", r.Event.ID, r.Status, r.Attempts,
					r.NextAttemptAt.Sub(b.clock.Now()), r.LastError)
			}
		}
		if len(all) != n {
			return false
		}
		rows = b.deliveryRows()
		for _, r := range all {
			if r.Status == outbox.StatusProcessing ||
				(r.Status == outbox.StatusPending && !r.NextAttemptAt.After(b.clock.Now())) {
				return false
			}
		}
		return true
	})
	return rows
}

func TestHostDownParksProbesAndRecovers(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *delivery.Config) {
		c.UnavailableAfter = time.Minute
		c.ProbeInterval = 5 * time.Minute
		c.ProbeMaxInterval = 10 * time.Minute
		c.ParkRecheck = 10 * time.Minute
	})
	alice := b.actor("alice")
	down := newRemote(t, b.keys, b.clock, false)
	healthy := newRemote(t, b.keys, b.clock, false)
	var failing atomic.Bool
	failing.Store(true)
	down.setRespond(func(*http.Request) (int, http.Header) {
		if failing.Load() {
			return http.StatusServiceUnavailable, nil
		}
		return http.StatusAccepted, nil
	})
	for _, n := range []string{"p1", "p2", "p3"} {
		down.follow(b, alice, n)
	}
	healthy.follow(b, alice, "h1")
	act := b.note(alice, "first")
	b.startWorker(8)

	// First attempts: every delivery to the down host fails and backs off;
	// the healthy host is not held up.
	rows := b.settledRows(4)
	if healthy.count() != 1 {
		t.Fatalf("healthy host got %d POSTs, want 1", healthy.count())
	}
	failed := 0
	for inbox, r := range rows {
		if strings.HasPrefix(inbox, down.URL()) && r.Status == outbox.StatusPending && r.Attempts == 1 {
			failed++
		}
	}
	if failed == 0 {
		t.Fatalf("no delivery to the down host failed: %+v", rows)
	}
	b.waitHost(down.Host(), delivery.HostFailing)

	// Past UnavailableAfter and the backoff: the next failure marks the host
	// unavailable.
	b.clock.Advance(61 * time.Second)
	st := b.waitHost(down.Host(), delivery.HostUnavailable)
	if !st.NextProbeAt.Equal(st.UnavailableSince.Add(5 * time.Minute)) {
		t.Errorf("next probe %s, unavailable since %s", st.NextProbeAt, st.UnavailableSince)
	}
	// Whatever was deferred for a slot or backing off wakes up and parks:
	// no POST, no attempt spent.
	posts := down.count()
	for range 12 {
		b.clock.Advance(10 * time.Second)
		b.settledRows(4)
		if n, err := b.svc.Health().CountParked(b.ctx); err == nil && n == 3 {
			break
		}
	}
	if down.count() != posts {
		t.Fatalf("%d POSTs to an unavailable host before its probe", down.count()-posts)
	}
	rows = b.settledRows(4)
	attempts := map[string]int{}
	for inbox, r := range rows {
		if strings.HasPrefix(inbox, down.URL()) {
			if r.Status != outbox.StatusPending {
				t.Fatalf("delivery to %s is %s", inbox, r.Status)
			}
			attempts[inbox] = r.Attempts
		}
	}
	waitFor(t, "parked deliveries", func() bool {
		n, err := b.svc.Health().CountParked(b.ctx)
		return err == nil && n == 3
	})

	// The probe: exactly one delivery is sent per probe time.
	b.clock.Advance(5 * time.Minute)
	waitFor(t, "a probe", func() bool { return down.count() == posts+1 })
	rows = b.settledRows(4)
	if down.count() != posts+1 {
		t.Fatalf("%d POSTs at the first probe, want 1", down.count()-posts)
	}
	st = b.waitHost(down.Host(), delivery.HostUnavailable)
	waitFor(t, "probe interval to grow", func() bool {
		st, _ = b.svc.Health().Host(b.ctx, down.Host())
		return st.ProbeInterval == 10*time.Minute
	})
	for inbox, r := range rows {
		if n, ok := attempts[inbox]; ok && r.Attempts != n {
			t.Errorf("parked delivery %s spent attempts: %d, was %d", inbox, r.Attempts, n)
		}
	}
	sts, err := b.svc.Status(b.ctx, act.URI, delivery.StatusQuery{})
	if err != nil {
		t.Fatal(err)
	}
	parked := 0
	for _, s := range sts {
		if s.State == delivery.StateParked {
			parked++
		}
	}
	if parked != 3 {
		t.Errorf("status shows %d parked deliveries, want 3: %+v", parked, sts)
	}

	// The host comes back: the next probe succeeds and releases the others
	// at once, without waiting for their park to end.
	failing.Store(false)
	b.clock.Advance(10 * time.Minute)
	waitFor(t, "every delivery done", func() bool {
		for _, r := range b.deliveryRows() {
			if r.Status != outbox.StatusDone {
				return false
			}
		}
		return true
	})
	b.waitHost(down.Host(), delivery.HostHealthy)
	ok := map[string]int{}
	for _, r := range down.received()[posts+1:] {
		ok[r.Path]++
	}
	if len(ok) != 3 {
		t.Errorf("after recovery the host got %v, want one delivery per inbox", ok)
	}
	waitFor(t, "parking cleared", func() bool {
		n, err := b.svc.Health().CountParked(b.ctx)
		return err == nil && n == 0
	})
}

// unavailable drives host to the unavailable state with two failed
// deliveries of a note (UnavailableAfter is one second) and returns the
// note's activity.
func unavailable(t *testing.T, b *bundle, a *store.Actor, rm *remote) *store.Activity {
	t.Helper()
	act := b.note(a, "to a dead host")
	b.settledRows(1)
	b.waitHost(rm.Host(), delivery.HostFailing)
	b.clock.Advance(6 * time.Second)
	b.waitHost(rm.Host(), delivery.HostUnavailable)
	b.settledRows(1)
	return act
}

func TestDeadLetterAfterParkMaxAndReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *delivery.Config) {
		c.UnavailableAfter = time.Second
		c.ProbeInterval = 30 * time.Minute
		c.ProbeMaxInterval = 30 * time.Minute
		c.ParkMax = time.Hour
		c.ParkRecheck = 10 * time.Minute
	})
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, false)
	up := downUntilUp(rm, http.StatusBadGateway)
	rm.follow(b, alice, "bob")
	b.startWorker(4)
	act := unavailable(t, b, alice, rm)

	// Parked, then probed every 30 minutes, until the hour is over.
	var row outbox.Row
	for range 12 {
		b.clock.Advance(11 * time.Minute)
		for _, r := range b.settledRows(1) {
			row = r
		}
		if row.Status == outbox.StatusDeadLettered {
			break
		}
	}
	if row.Status != outbox.StatusDeadLettered || !strings.Contains(row.LastError, "host unavailable") {
		t.Fatalf("after the park maximum the delivery is %s (%q), want dead-lettered for its host", row.Status, row.LastError)
	}
	var sts []delivery.InboxStatus
	waitFor(t, "the dead record", func() bool {
		var err error
		sts, err = b.svc.Status(b.ctx, act.URI, delivery.StatusQuery{})
		return err == nil && len(sts) == 1 && sts[0].LastOutcome == delivery.OutcomeDead
	})
	if sts[0].State != delivery.StateFailed || !strings.Contains(sts[0].LastError, "parked") {
		t.Errorf("status %+v, want failed and why", sts[0])
	}

	// It stays replayable: the host is back, an operator retries it.
	up.Store(true)
	posts := rm.count()
	if err := b.queue.Retry(b.ctx, row.ID); err != nil {
		t.Fatal(err)
	}
	b.waitDelivered("the replayed delivery")
	if rm.count() != posts+1 {
		t.Errorf("replay sent %d POSTs, want 1", rm.count()-posts)
	}
	b.waitHost(rm.Host(), delivery.HostHealthy)
}

func TestSignOfLifeReleasesParkedDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *delivery.Config) {
		c.UnavailableAfter = time.Second
		c.ProbeInterval = time.Hour
	})
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, false)
	up := downUntilUp(rm, http.StatusServiceUnavailable)
	rm.follow(b, alice, "bob")
	b.startWorker(4)
	unavailable(t, b, alice, rm)
	b.clock.Advance(11 * time.Second) // the backed-off delivery parks
	b.settledRows(1)
	up.Store(true)
	b.svc.Health().SignOfLife(b.ctx, rm.Host())
	b.waitDelivered("release on a sign of life")
	b.waitHost(rm.Host(), delivery.HostHealthy)
}

func TestRetryAfterIsALowerBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, false)
	var calls atomic.Int32
	rm.setRespond(func(*http.Request) (int, http.Header) {
		if calls.Add(1) == 1 {
			return http.StatusTooManyRequests, http.Header{"Retry-After": {"120"}}
		}
		return http.StatusAccepted, nil
	})
	rm.follow(b, alice, "bob")
	b.startWorker(2)
	start := b.clock.Now()
	b.note(alice, "rate limited")
	var row outbox.Row
	for _, r := range b.settledRows(1) {
		row = r
	}
	if row.Status != outbox.StatusPending || row.Attempts != 1 || row.NextAttemptAt.Before(start.Add(120*time.Second)) {
		t.Fatalf("after a 429 with Retry-After 120: %s, %d attempts, next at +%s", row.Status, row.Attempts,
			row.NextAttemptAt.Sub(start))
	}
	b.clock.Advance(60 * time.Second) // past the 5 s backoff, not past Retry-After
	b.settledRows(1)
	if rm.count() != 1 {
		t.Fatalf("re-sent before Retry-After: %d POSTs", rm.count())
	}
	b.clock.Advance(61 * time.Second)
	b.waitDelivered("delivery after Retry-After")
	if rm.count() != 2 {
		t.Errorf("%d POSTs, want 2", rm.count())
	}
	if st, err := b.svc.Health().Host(b.ctx, rm.Host()); err == nil && st.State != delivery.HostHealthy {
		t.Errorf("a 429 counted against the host: %+v", st)
	}
}

func TestPrivateAddressGuard(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *delivery.Config) { c.AllowPrivate = false })
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, false)
	rm.follow(b, alice, "bob")
	act := b.note(alice, "to loopback")
	b.startWorker(2)
	var row outbox.Row
	for _, r := range b.settledRows(1) {
		row = r
	}
	if row.Status != outbox.StatusDeadLettered || !strings.Contains(row.LastError, "refusing non-global address") {
		t.Fatalf("delivery to 127.0.0.1 without --allow-private-addresses: %s %q", row.Status, row.LastError)
	}
	if n := rm.requests.Load(); n != 0 {
		t.Fatalf("the loopback server got %d requests", n)
	}
	waitFor(t, "the refusal record", func() bool {
		sts, err := b.svc.Status(b.ctx, act.URI, delivery.StatusQuery{})
		return err == nil && len(sts) == 1 && sts[0].LastOutcome == delivery.OutcomeRefused &&
			sts[0].State == delivery.StateFailed
	})
}

func TestGoneInboxRemovesFollower(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, false)
	rm.setRespond(func(r *http.Request) (int, http.Header) {
		if r.URL.Path == "/users/gone/inbox" {
			return http.StatusGone, nil
		}
		return http.StatusAccepted, nil
	})
	rm.follow(b, alice, "gone")
	rm.follow(b, alice, "here")
	b.note(alice, "hello")
	b.startWorker(2)
	b.waitTicking("both deliveries settled", func() bool {
		rows := b.deliveryRows()
		for _, r := range rows {
			if r.Status == outbox.StatusPending || r.Status == outbox.StatusProcessing {
				return false
			}
		}
		return len(rows) == 2
	})
	rows := b.settledRows(2)
	if r := rows[rm.actorURL("gone")+"/inbox"]; r.Status != outbox.StatusDeadLettered || !strings.Contains(r.LastError, "410") {
		t.Errorf("delivery to a 410 inbox: %s %q", r.Status, r.LastError)
	}
	if r := rows[rm.actorURL("here")+"/inbox"]; r.Status != outbox.StatusDone {
		t.Errorf("delivery to a live inbox: %s %q", r.Status, r.LastError)
	}
	if ok, err := b.st.IsFollower(b.ctx, alice.ID, rm.actorURL("gone")); err != nil || ok {
		t.Errorf("gone actor still a follower (%v)", err)
	}
	if ok, err := b.st.IsFollower(b.ctx, alice.ID, rm.actorURL("here")); err != nil || !ok {
		t.Errorf("live follower removed (%v)", err)
	}
}

func TestPauseResumeDrain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, false)
	rm.follow(b, alice, "bob")
	h := b.svc.Health()
	if err := h.Pause(b.ctx, rm.Host(), "investigating"); err != nil {
		t.Fatal(err)
	}
	act := b.note(alice, "while paused")
	b.startWorker(2)
	b.settledRows(1)
	if rm.count() != 0 {
		t.Fatalf("paused host got %d POSTs", rm.count())
	}
	sts, err := b.svc.Status(b.ctx, act.URI, delivery.StatusQuery{})
	if err != nil || len(sts) != 1 || sts[0].State != delivery.StateParked || sts[0].Attempts != 0 {
		t.Fatalf("status while paused: %+v %v", sts, err)
	}
	n, err := h.Resume(b.ctx, rm.Host())
	if err != nil || n != 1 {
		t.Fatalf("resume released %d (%v), want 1", n, err)
	}
	waitFor(t, "delivery after resume", func() bool { return rm.count() == 1 })

	// Drain discards what is pending for the host.
	if err := h.Pause(b.ctx, rm.Host(), "noisy"); err != nil {
		t.Fatal(err)
	}
	second := b.note(alice, "to be drained")
	b.settledRows(2)
	drained, err := h.Drain(b.ctx, rm.Host())
	if err != nil || drained != 1 {
		t.Fatalf("drain discarded %d (%v), want 1", drained, err)
	}
	sts, err = b.svc.Status(b.ctx, second.URI, delivery.StatusQuery{})
	if err != nil || len(sts) != 1 || sts[0].State != delivery.StateDiscarded {
		t.Fatalf("status after drain: %+v %v", sts, err)
	}
	if _, err := h.Resume(b.ctx, "never.example"); !errors.Is(err, delivery.ErrUnknownHost) {
		t.Errorf("resume of an unknown host: %v", err)
	}
	hosts, err := h.Hosts(b.ctx, delivery.HostQuery{State: delivery.HostPaused})
	if err != nil || len(hosts) != 1 || hosts[0].PauseReason != "noisy" {
		t.Errorf("paused hosts: %+v %v", hosts, err)
	}
}

func TestSlowHostDefersWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *delivery.Config) {
		c.PerHostConcurrency = 1
		c.SlotWait = 50 * time.Millisecond
	})
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, false)
	release := make(chan struct{})
	var first atomic.Bool
	rm.setRespond(func(*http.Request) (int, http.Header) {
		if first.CompareAndSwap(false, true) {
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		}
		return http.StatusAccepted, nil
	})
	rm.follow(b, alice, "one")
	rm.follow(b, alice, "two")
	b.note(alice, "slow")
	b.startWorker(4)
	waitFor(t, "one delivery deferred for a slot", func() bool {
		for _, r := range b.deliveryRows() {
			if r.Status == outbox.StatusPending && r.Attempts == 0 && r.NextAttemptAt.After(b.clock.Now()) {
				return true
			}
		}
		return false
	})
	close(release)
	b.waitTicking("both delivered", func() bool {
		rows := b.deliveryRows()
		for _, r := range rows {
			if r.Status != outbox.StatusDone {
				return false
			}
		}
		return len(rows) == 2
	})
	for _, r := range b.deliveryRows() {
		if r.Attempts != 0 {
			t.Errorf("a deferred delivery spent %d attempts", r.Attempts)
		}
	}
}

func TestRetryNowResetAndHostStats(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *delivery.Config) {
		c.UnavailableAfter = time.Second
		c.ProbeInterval = time.Hour
	})
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, false)
	up := downUntilUp(rm, http.StatusInternalServerError)
	rm.follow(b, alice, "bob")
	b.startWorker(2)
	h := b.svc.Health()
	unavailable(t, b, alice, rm)
	b.clock.Advance(11 * time.Second) // parks, waiting an hour for its probe
	b.settledRows(1)
	counts := map[string]int64{}
	if err := h.CountHosts(b.ctx, func(state string, n int64) { counts[state] += n }); err != nil {
		t.Fatal(err)
	}
	if counts[delivery.HostUnavailable] != 1 {
		t.Errorf("host counts %v, want one unavailable", counts)
	}

	// Retry now: the probe is due at once; one delivery probes.
	up.Store(true)
	posts := rm.count()
	n, err := h.RetryNow(b.ctx, rm.Host())
	if err != nil || n != 1 {
		t.Fatalf("retry now released %d (%v), want 1", n, err)
	}
	b.waitHost(rm.Host(), delivery.HostHealthy)
	b.waitDelivered("delivery after retry now")
	if rm.count() != posts+1 {
		t.Errorf("retry now sent %d POSTs, want 1", rm.count()-posts)
	}

	// Reset forgets failures.
	up.Store(false)
	b.note(alice, "again")
	b.waitHost(rm.Host(), delivery.HostFailing)
	if _, err := h.Reset(b.ctx, rm.Host()); err != nil {
		t.Fatal(err)
	}
	st, err := h.Host(b.ctx, rm.Host())
	if err != nil || st.State != delivery.HostHealthy || st.ConsecutiveFailures != 0 {
		t.Errorf("after reset: %+v %v", st, err)
	}
	if _, err := h.Reset(b.ctx, "never.example"); !errors.Is(err, delivery.ErrUnknownHost) {
		t.Errorf("reset of an unknown host: %v", err)
	}
}

// downUntilUp makes rm answer status to every POST until the returned flag is
// set, then 202.
func downUntilUp(rm *remote, status int) *atomic.Bool {
	up := new(atomic.Bool)
	rm.setRespond(func(*http.Request) (int, http.Header) {
		if up.Load() {
			return http.StatusAccepted, nil
		}
		return status, nil
	})
	return up
}
