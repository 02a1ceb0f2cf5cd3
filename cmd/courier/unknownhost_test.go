package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
)

// A Follow of an actor on a host whose name does not exist: the host shows
// under admin hosts (and the console's hosts page) with the DNS error from
// the first failed fan-out, before any delivery to it exists; the console's
// overview says that the waiting event is not due rather than "0s oldest
// due", its event page does not pretend POSTs were made, and the fan-out is
// dead-lettered after delivery.NameNotFoundAttempts attempts, not the
// outbox's ten.
func TestFollowOfUnknownHost(t *testing.T) {
	t.Parallel()
	const host = "courier-nowhere.invalid"
	if _, err := net.DefaultResolver.LookupHost(t.Context(), host); !errors.As(err, new(*net.DNSError)) || !err.(*net.DNSError).IsNotFound {
		t.Skipf("this machine's resolver does not answer NXDOMAIN for %s: %v", host, err)
	}
	rig := newConsoleRig(t)
	bg := context.Background()
	act, err := rig.app.store.Follow(bg, rig.alice, "https://"+host+"/users/zoe")
	if err != nil {
		t.Fatal(err)
	}
	row := func() outbox.Row {
		t.Helper()
		rs, err := rig.app.queue.List(bg, outbox.Filter{EventID: act.EventID})
		if err != nil || len(rs) != 1 {
			t.Fatalf("the Follow's event: %v (%d rows)", err, len(rs))
		}
		return rs[0]
	}
	waitFor(t, "the first fan-out attempt to fail", func() bool { r := row(); return r.Attempts >= 1 && r.Status == outbox.StatusPending })
	if r := row(); r.Event.Type != activitypub.EventOutgoing || !strings.Contains(r.LastError, "no such host") {
		t.Fatalf("the Follow's event after one attempt: %+v", r)
	}

	cc := newConsoleClient(t, rig.ops)
	if resp, _ := cc.do(http.MethodPost, "/console/login", url.Values{"token": {consoleToken}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	// The host is listed, with why it fails, though nothing was POSTed.
	code, out, errb := runCommand("admin", "--server", rig.ops, "--admin-token", consoleToken, "hosts")
	if code != 0 || !strings.Contains(out, host) || !strings.Contains(out, "unknown host") {
		t.Fatalf("courier admin hosts: exit %d, stdout %q, stderr %q; want %s with its DNS error", code, out, errb, host)
	}
	if _, page := cc.do(http.MethodGet, "/console/hosts", nil, nil); !strings.Contains(page, host) {
		t.Errorf("the console's hosts page does not list %s:\n%s", host, page)
	}
	// The overview: one pending, none due (it backs off).
	_, page := cc.do(http.MethodGet, "/console/", nil, nil)
	if !strings.Contains(page, `<span class="n">none</span> due`) || !strings.Contains(page, "1 pending</a> wait for a later attempt") {
		t.Errorf("the overview while the Follow backs off:\n%s", page)
	}
	// The event page: its attempts ran the fan-out, no POST is claimed.
	_, page = cc.do(http.MethodGet, "/console/events/"+act.EventID, nil, nil)
	if strings.Contains(page, "No attempts.") || !strings.Contains(page, "(runs of its handler)") ||
		!strings.Contains(page, "event sends no POST itself: its 1 attempts ran its handler") {
		t.Errorf("the event page of the backing-off Follow:\n%s", page)
	}
	// Dead-lettered at the NameNotFoundAttempts-th attempt (the backoff
	// between them is 5 s, then 10 s).
	deadline := time.Now().Add(3 * time.Minute)
	for r := row(); r.Status != outbox.StatusDeadLettered; r = row() {
		if time.Now().After(deadline) {
			t.Fatalf("the Follow's event is not dead-lettered: %+v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := row(); r.Attempts != delivery.NameNotFoundAttempts || !strings.Contains(r.LastError, "no such host") {
		t.Errorf("dead-lettered after %d attempts (%q), want %d", r.Attempts, r.LastError, delivery.NameNotFoundAttempts)
	}
	hs, err := rig.app.delivery.Health().Host(bg, host)
	if err != nil || hs.ConsecutiveFailures != delivery.NameNotFoundAttempts {
		t.Errorf("the host's health %+v, %v; want %d failures", hs, err, delivery.NameNotFoundAttempts)
	}
}
