package delivery_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
)

// pager is a channel delivery knows nothing of: its targets are named
// pager-<name>, its events carry the path and body of their POST to base.
type pager struct {
	base string

	mu       sync.Mutex
	attempts []string // outcome and status of each POST
	opts     activitypub.ClientOptions
}

type page struct {
	Path string `json:"path"`
	Body string `json:"body"`
}

func (p *pager) Name() string            { return "pager" }
func (p *pager) EventType() string       { return "pager.page" }
func (p *pager) Handler() string         { return "pager.send" }
func (p *pager) Owns(target string) bool { return strings.HasPrefix(target, "pager-") }

func (p *pager) Request(_ context.Context, ev outbox.Event, _ time.Time) (*http.Request, []byte, error) {
	if ev.Target == "pager-gone" {
		return nil, nil, fmt.Errorf("%w: %s", delivery.ErrTargetGone, ev.Target)
	}
	var pg page
	if err := json.Unmarshal(ev.Payload, &pg); err != nil {
		return nil, nil, outbox.Permanent(err)
	}
	req, err := http.NewRequest(http.MethodPost, p.base+pg.Path, strings.NewReader(pg.Body))
	if err != nil {
		return nil, nil, outbox.Permanent(err)
	}
	req.Header.Set("Pager-Event", ev.ID)
	return req, []byte(pg.Body), nil
}

func (p *pager) Client(opts activitypub.ClientOptions) *http.Client {
	p.mu.Lock()
	p.opts = opts
	p.mu.Unlock()
	return activitypub.NewClient(opts)
}

func (p *pager) Attempted(outcome string, status int, _ time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempts = append(p.attempts, fmt.Sprintf("%s %d", outcome, status))
}

func (p *pager) attempted() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.attempts...)
}

// TestChannelDeliversItsTargets: the events of a channel registered in
// Config.Channels go through the real worker to a loopback server: a
// delivered one is POSTed as the channel built it, recorded under its
// target and counted by the channel, not by delivery's metrics; a failure
// makes its target failing in the hosts' health, and Drain finds the
// target's events by the channel's event type; an event whose target is
// gone is dropped without a POST.
func TestChannelDeliversItsTargets(t *testing.T) {
	t.Parallel()
	type hit struct{ path, event, body string }
	var mu sync.Mutex
	var hits []hit
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		hits = append(hits, hit{r.URL.Path, r.Header.Get("Pager-Event"), string(body)})
		mu.Unlock()
		if r.URL.Path == "/down" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	hitsOf := func(path string) []hit {
		mu.Lock()
		defer mu.Unlock()
		var out []hit
		for _, h := range hits {
			if h.path == path {
				out = append(out, h)
			}
		}
		return out
	}
	ch := &pager{base: srv.URL}
	b := setup(t, func(c *delivery.Config) { c.Channels = []delivery.Channel{ch} })
	if got := b.svc.EventType("pager-up"); got != "pager.page" {
		t.Errorf("EventType(pager-up) = %q, want the channel's", got)
	}
	if got := b.svc.EventType("remote.example"); got != delivery.EventPost {
		t.Errorf("EventType(remote.example) = %q, want %q", got, delivery.EventPost)
	}
	if ch.opts.Timeout != 5*time.Second || !ch.opts.AllowPrivate {
		t.Errorf("the channel's client options = %+v, want delivery's timeout and AllowPrivate", ch.opts)
	}
	ids := map[string]string{}
	for _, name := range []string{"up", "down", "gone"} {
		ids[name] = outbox.ChildID("pager test", name)
	}
	enqueue := func(id, target, path, body string) {
		t.Helper()
		pl, err := json.Marshal(page{Path: path, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
			return outbox.Enqueue(b.ctx, tx, outbox.Event{ID: id, Type: "pager.page", Target: target, Payload: pl,
				OccurredAt: b.clock.Now()})
		}); err != nil {
			t.Fatal(err)
		}
	}
	row := func(id string) outbox.Row {
		t.Helper()
		rs, err := b.queue.List(b.ctx, outbox.Filter{EventID: id})
		if err != nil || len(rs) != 1 {
			t.Fatalf("row %s: %v (%d rows)", id, err, len(rs))
		}
		return rs[0]
	}
	enqueue(ids["up"], "pager-up", "/up", `{"hello":"up"}`)
	enqueue(ids["down"], "pager-down", "/down", `{"hello":"down"}`)
	enqueue(ids["gone"], "pager-gone", "/gone", `{"hello":"gone"}`)
	b.startWorker(4)

	waitFor(t, "the delivered page", func() bool { return row(ids["up"]).Status == outbox.StatusDone })
	if h := hitsOf("/up"); len(h) != 1 || h[0].event != ids["up"] || h[0].body != `{"hello":"up"}` {
		t.Errorf("POSTs to /up = %+v, want the channel's request once", h)
	}
	waitFor(t, "the gone target's page settled", func() bool { return row(ids["gone"]).Status == outbox.StatusDone })
	if h := hitsOf("/gone"); len(h) != 0 {
		t.Errorf("POSTs for a gone target = %+v, want none", h)
	}

	// The failing target's health is kept under its name.
	st := b.waitHost("pager-down", delivery.HostFailing)
	if st.ConsecutiveFailures != 1 || !strings.Contains(st.LastError, "503") {
		t.Errorf("health of pager-down = %+v, want one failure, the 503", st)
	}
	waitFor(t, "the failed page back for a retry", func() bool {
		r := row(ids["down"])
		return r.Status == outbox.StatusPending && r.Attempts == 1
	})
	waitFor(t, "the channel's attempt records", func() bool {
		var n int
		err := b.db.Read.QueryRowContext(b.ctx, `SELECT COUNT(*) FROM delivery_attempts WHERE activity_id LIKE 'pager:%'`).Scan(&n)
		return err == nil && n == 2
	})
	var host, inbox, outcome string
	var status int
	if err := b.db.Read.QueryRowContext(b.ctx, `SELECT host, inbox, outcome, status_code FROM delivery_attempts
		WHERE event_id = ? AND activity_id = ?`, ids["up"], "pager:"+ids["up"]).Scan(&host, &inbox, &outcome, &status); err != nil {
		t.Fatal(err)
	}
	if host != "pager-up" || inbox != srv.URL+"/up" || outcome != delivery.OutcomeDelivered || status != http.StatusNoContent {
		t.Errorf("attempt record of the delivered page = %s %s %s %d", host, inbox, outcome, status)
	}
	got := ch.attempted()
	if len(got) != 2 || !strings.Contains(strings.Join(got, ","), "delivered 204") ||
		!strings.Contains(strings.Join(got, ","), "retry 503") {
		t.Errorf("the channel counted %q, want the delivered and the failed POST", got)
	}

	// Drain finds the target's pending events by the channel's type.
	n, err := b.svc.Health().Drain(b.ctx, "pager-down")
	if err != nil || n != 1 {
		t.Fatalf("Drain(pager-down) = %d, %v; want its one pending page", n, err)
	}
}

// TestChannelEventTypeTaken: a channel may not take one of delivery's own
// event types, nor another channel's.
func TestChannelEventTypeTaken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, chs := range [][]delivery.Channel{
		{&typed{typ: delivery.EventPost}},
		{&pager{}, &pager{}},
	} {
		cfg := b.cfg
		cfg.Channels = chs
		if _, err := delivery.New(cfg); err == nil || !strings.Contains(err.Error(), "is taken") {
			t.Errorf("New with channels of types %q, %q: %v, want the type taken", chs[0].EventType(),
				chs[len(chs)-1].EventType(), err)
		}
	}
}

// typed is a pager with another event type.
type typed struct {
	pager
	typ string
}

func (t *typed) EventType() string { return t.typ }
