package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/admin"
	"github.com/courier-ap/courier/limit"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/store"
)

func TestDisabledAnswers404Everywhere(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ *bundle, c *admin.Config) { c.Token = "" })
	for _, p := range []struct{ method, path string }{
		{"GET", "/admin"}, {"GET", "/admin/"}, {"GET", "/admin/events"}, {"GET", "/admin/events/1"},
		{"POST", "/admin/hosts/a.example/drain?confirm=a.example"}, {"DELETE", "/admin/domain-blocks/x.example"},
		{"GET", "/admin/no/such/thing"},
	} {
		// With or without a token: there is none to match.
		for _, tok := range []string{"", token} {
			status, raw := b.do(p.method, p.path, tok, "")
			var e admin.ErrorBody
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatalf("%s %s: %s: %v", p.method, p.path, raw, err)
			}
			if status != http.StatusNotFound || e.Code != admin.EDISABLED || !strings.Contains(e.Error, "admin API is disabled") {
				t.Errorf("%s %s: %d %+v, want 404 saying the admin API is disabled", p.method, p.path, status, e)
			}
		}
	}
	// Paths outside /admin/ are not the API's.
	r, err := http.Get(b.srv.URL + "/administrator")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusNotFound || strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		t.Errorf("/administrator: %d %s, want the router's plain 404", r.StatusCode, r.Header.Get("Content-Type"))
	}
}

// TestFailedTokensThrottled: after limit.DefaultFailureBurst failed
// attempts from one address, every request from it (the right token too,
// which is then never compared) answers 429 with Retry-After until a token
// is regained; a dictionary attack runs at ten guesses a minute.
func TestFailedTokensThrottled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range limit.DefaultFailureBurst {
		if st, body := b.do(http.MethodGet, "/admin/stats", fmt.Sprintf("guess-%02d-%s", i, strings.Repeat("x", 24)), ""); st != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d %s, want 401", i+1, st, body)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/admin/stats", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e admin.ErrorBody
	err = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusTooManyRequests || e.Code != admin.ETHROTTLED || resp.Header.Get("Retry-After") != "6" {
		t.Fatalf("after %d failures: %d %+v Retry-After %q (%v), want 429 too_many_requests with Retry-After 6",
			limit.DefaultFailureBurst, resp.StatusCode, e, resp.Header.Get("Retry-After"), err)
	}
	b.clock.Advance(6 * time.Second)
	if st, body := b.do(http.MethodGet, "/admin/stats", token, ""); st != http.StatusOK {
		t.Fatalf("the right token once a try is regained: %d %s", st, body)
	}
	if st, _ := b.do(http.MethodGet, "/admin/stats", "wrong-"+strings.Repeat("y", 30), ""); st != http.StatusUnauthorized {
		t.Fatalf("the regained try is a try: %d, want 401", st)
	}
	if st, _ := b.do(http.MethodGet, "/admin/stats", token, ""); st != http.StatusTooManyRequests {
		t.Fatalf("after spending it: %d, want 429", st)
	}
}

func TestTokenChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		name, header string
	}{
		{"none", ""},
		{"wrong", "Bearer " + strings.Repeat("x", len(token))},
		{"prefix", "Bearer " + token[:len(token)-1]},
		{"longer", "Bearer " + token + "0"},
		{"basic scheme", "Basic " + token},
		{"no scheme", token},
	}
	for _, path := range []string{"/admin/events", "/admin/no/such/thing", "/admin/events/retry"} {
		for _, c := range cases {
			method := http.MethodGet
			if strings.HasSuffix(path, "retry") {
				method = http.MethodPost
			}
			req, _ := http.NewRequest(method, b.srv.URL+path, nil)
			if c.header != "" {
				req.Header.Set("Authorization", c.header)
			}
			// Slower than the failed-attempt throttle's rate, which
			// TestFailedTokensThrottled checks.
			b.clock.Advance(time.Minute)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var e admin.ErrorBody
			err = json.NewDecoder(resp.Body).Decode(&e)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusUnauthorized || e.Code != admin.EUNAUTHORIZED ||
				!strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s token %s: %d %+v %v, want 401 with a JSON error and a Bearer challenge",
					method, path, c.name, resp.StatusCode, e, err)
			}
		}
	}
	if n := len(b.logs.records("admin: request refused: missing or wrong bearer token")); n != 3*len(cases) {
		t.Errorf("%d refusals logged, want %d", n, 3*len(cases))
	}
	// The right token, in any case of the scheme.
	for _, scheme := range []string{"Bearer", "bearer"} {
		req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/admin/events", nil)
		req.Header.Set("Authorization", scheme+" "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s token: %d, want 200", scheme, resp.StatusCode)
		}
	}
	// Authorized, an unknown endpoint is a JSON 404 and a wrong method 405.
	b.wantError("GET", "/admin/no/such/thing", "", http.StatusNotFound, "no admin endpoint")
	b.wantError("DELETE", "/admin/events", "", http.StatusMethodNotAllowed, "DELETE is not allowed")
	var idx struct {
		Endpoints []admin.Endpoint `json:"endpoints"`
	}
	b.call("GET", "/admin/", http.StatusOK, &idx)
	if len(idx.Endpoints) != len(admin.Endpoints) {
		t.Errorf("index lists %d endpoints, want %d", len(idx.Endpoints), len(admin.Endpoints))
	}
}

func storeOf(db *sqldb.DB) *store.Store { return store.New(db, "https://courier.example", nil) }

func TestNewValidates(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	q := outbox.NewQueue(db.Write, outbox.QueueOptions{})
	for _, c := range []admin.Config{
		{Token: "t"},
		{Token: "t", Queue: q},
		{Token: " t ", Queue: q, Store: storeOf(db)},
		{Token: "t", Queue: q, Store: storeOf(db), Lease: time.Millisecond},
		{Token: "admin", Queue: q, Store: storeOf(db)},
		{Token: strings.Repeat("x", admin.MinTokenLen-1), Queue: q, Store: storeOf(db)},
	} {
		if _, err := admin.New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
	if _, err := admin.New(admin.Config{}); err != nil {
		t.Errorf("a disabled API needs nothing: %v", err)
	}
	_, err := admin.New(admin.Config{Token: "admin", Queue: q, Store: storeOf(db)})
	if err == nil || !strings.Contains(err.Error(), "at least 32") || !strings.Contains(err.Error(), "openssl rand -hex 32") {
		t.Errorf("a short token: %v, want the minimum and how to make one", err)
	}
	if _, err := admin.New(admin.Config{Token: strings.Repeat("x", admin.MinTokenLen), Queue: q, Store: storeOf(db)}); err != nil {
		t.Errorf("a token of %d characters: %v", admin.MinTokenLen, err)
	}
}

// ids returns the event ids of a listing.
func ids(l admin.EventList) []string {
	out := make([]string, 0, len(l.Events))
	for _, e := range l.Events {
		out = append(out, e.EventID)
	}
	return out
}

func eventIDs(evs []outbox.Event) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}

func TestListEventsByStatusTypeHostAndStuck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The worker handles "ok" events and dead-letters "bad" ones; "held"
	// events have no handler registered yet and stay pending while the
	// worker is stopped.
	reg := outbox.NewRegistry()
	reg.Handle("ok", "ok", func(context.Context, outbox.Event) error { return nil })
	reg.Handle("bad", "bad", func(context.Context, outbox.Event) error { return outbox.Permanent(errors.New("410 gone")) })
	stop := b.startWorker(reg, 3)
	done := b.enqueue(events(2, "ok", "a.example")...)
	dead := b.enqueue(append(events(2, "bad", "a.example"), events(1, "bad", "b.example")...)...)
	for _, e := range done {
		b.waitStatus(e.ID, outbox.StatusDone)
	}
	for _, e := range dead {
		b.waitStatus(e.ID, outbox.StatusDeadLettered)
	}
	stop()
	enqueuedFrom := time.Now()
	pending := b.enqueue(append(events(2, "held", "a.example"), events(2, "held", "b.example")...)...)
	enqueuedTo := time.Now()
	// Claim one row as a worker that then dies would, and one more later.
	lease := 600 * time.Second
	claimed, err := b.queue.Claim(b.ctx, 1, lease)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v %d", err, len(claimed))
	}
	b.clock.Advance(lease + time.Second)
	// A claim with a longer lease leaves the first claim alone (a stale
	// claim would be taken back first) and takes the next pending row.
	fresh, err := b.queue.Claim(b.ctx, 1, 2*lease)
	if err != nil || len(fresh) != 1 {
		t.Fatalf("claim: %v %d", err, len(fresh))
	}

	list := func(q string) admin.EventList {
		t.Helper()
		var l admin.EventList
		b.call("GET", "/admin/events"+q, http.StatusOK, &l)
		return l
	}
	if got := ids(list("?status=done")); !slices.Equal(got, eventIDs(done)) {
		t.Errorf("done = %v, want %v", got, eventIDs(done))
	}
	deadList := list("?status=dead_lettered")
	if got := ids(deadList); !slices.Equal(got, eventIDs(dead)) {
		t.Errorf("dead_lettered = %v, want %v", got, eventIDs(dead))
	}
	for _, e := range deadList.Events {
		if e.Attempts != 1 || !strings.Contains(e.LastError, "410 gone") || e.Type != "bad" {
			t.Errorf("dead-lettered event %+v: want 1 attempt and the handler's error", e)
		}
	}
	if got := ids(list("?status=dead_lettered&host=b.example")); !slices.Equal(got, []string{dead[2].ID}) {
		t.Errorf("dead_lettered on b.example = %v, want %v", got, dead[2].ID)
	}
	if got := ids(list("?status=done&type=bad")); len(got) != 0 {
		t.Errorf("done bad events = %v, want none", got)
	}
	stuck := list("?status=stuck")
	if len(stuck.Events) != 1 || stuck.Events[0].RowID != claimed[0].ID || !stuck.Events[0].Stuck ||
		stuck.Events[0].Status != outbox.StatusProcessing || stuck.Events[0].ClaimedAt.IsZero() {
		t.Errorf("stuck = %+v, want only row %d, flagged stuck", stuck.Events, claimed[0].ID)
	}
	processing := list("?status=processing")
	if len(processing.Events) != 2 || processing.Events[1].Stuck || processing.Events[1].RowID != fresh[0].ID {
		t.Errorf("processing = %+v, want the stuck row and the fresh one", processing.Events)
	}
	if got := list("?status=pending&type=held"); len(got.Events) != 2 {
		t.Errorf("pending held = %v, want the two unclaimed", ids(got))
	}
	all := list("?type=held")
	if got := ids(all); !slices.Equal(got, eventIDs(pending)) {
		t.Errorf("held = %v, want %v", got, eventIDs(pending))
	}
	// Ages follow the injected clock (an hour and a lease ahead of the real
	// clock when the test began) from the rows' real enqueue time, however
	// long the steps before took.
	lo := int64(b.clock.Now().Sub(enqueuedTo)/time.Second) - 1
	hi := int64(b.clock.Now().Sub(enqueuedFrom)/time.Second) + 1
	if lo < 3600 {
		t.Fatalf("the test clock is %s ahead of the rows' enqueue time, want over an hour", b.clock.Now().Sub(enqueuedTo))
	}
	for _, e := range all.Events {
		if e.AgeSeconds < lo || e.AgeSeconds > hi {
			t.Errorf("event %s age %ds, want %d to %d", e.EventID, e.AgeSeconds, lo, hi)
		}
		if e.Payload != nil {
			t.Errorf("a listing carries payloads: %s", e.Payload)
		}
	}

	// Bad filters are refused, never silently widened.
	for q, sub := range map[string]string{
		"?status=stuk":          `status "stuk"`,
		"?older_than=yesterday": "older_than",
		"?older_than=-1h":       "older_than",
		"?limit=0":              "limit",
		"?limit=1001":           "limit",
		"?limit=x":              "limit",
		"?cursor=abc":           "cursor",
		"?cursor=-4":            "cursor",
		"?stauts=pending":       `unknown parameter "stauts"`,
	} {
		e := b.wantError("GET", "/admin/events"+q, "", http.StatusBadRequest, sub)
		if e.Code != admin.EINVALID {
			t.Errorf("%s: code %s", q, e.Code)
		}
	}
}

func TestListEventsPagesWithCursor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	evs := b.enqueue(append(events(7, "x", "a.example"), events(5, "y", "b.example")...)...)
	// Claimed rows interleave with pending ones so the stuck filter (applied
	// while scanning) pages over gaps.
	rows, err := b.queue.Claim(b.ctx, 12, time.Minute)
	if err != nil || len(rows) != 12 {
		t.Fatalf("claim: %v %d", err, len(rows))
	}
	for i, r := range rows {
		if i%3 == 0 {
			continue // stays claimed
		}
		if _, err := b.queue.Release(b.ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	b.clock.Advance(outbox.DefaultLease + time.Second)
	for _, c := range []struct {
		q    string
		want []string
	}{
		{"", eventIDs(evs)},
		{"type=x&", eventIDs(evs[:7])},
		{"host=b.example&", eventIDs(evs[7:])},
		{"status=stuck&", []string{evs[0].ID, evs[3].ID, evs[6].ID, evs[9].ID}},
		{"status=pending&host=a.example&", []string{evs[1].ID, evs[2].ID, evs[4].ID, evs[5].ID}},
	} {
		for _, limit := range []int{1, 2, 3, 5, 100} {
			var got []string
			cur := ""
			for page := 0; ; page++ {
				if page > len(evs)+1 {
					t.Fatalf("%s limit %d: cursor does not end", c.q, limit)
				}
				var l admin.EventList
				b.call("GET", fmt.Sprintf("/admin/events?%slimit=%d&cursor=%s", c.q, limit, cur), http.StatusOK, &l)
				if len(l.Events) > limit {
					t.Fatalf("%s: page of %d over limit %d", c.q, len(l.Events), limit)
				}
				got = append(got, ids(l)...)
				if l.NextCursor == "" {
					break
				}
				if len(l.Events) == 0 {
					t.Fatalf("%s limit %d: empty page with a cursor", c.q, limit)
				}
				cur = l.NextCursor
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("%slimit=%d: paged %v, want %v", c.q, limit, got, c.want)
			}
		}
	}
}

func TestListEventsOlderThan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.enqueue(events(3, "x", "a.example")...)
	boundary := b.row(old[2].ID).CreatedAt
	// The next rows must be enqueued in a later millisecond.
	waitFor(t, "the next millisecond", func() bool { return time.Now().UnixMilli() > boundary.UnixMilli() })
	young := b.enqueue(events(2, "x", "a.example")...)
	d := b.clock.Now().Sub(boundary)
	var l admin.EventList
	b.call("GET", "/admin/events?older_than="+d.String(), http.StatusOK, &l)
	if !slices.Equal(ids(l), eventIDs(old)) {
		t.Errorf("older than %s: %v, want %v", d, ids(l), eventIDs(old))
	}
	b.call("GET", "/admin/events?older_than="+(d+time.Millisecond).String(), http.StatusOK, &l)
	if len(l.Events) != 0 {
		t.Errorf("older than %s: %v, want none", d+time.Millisecond, ids(l))
	}
	b.call("GET", "/admin/events?older_than=0s", http.StatusOK, &l)
	if !slices.Equal(ids(l), append(eventIDs(old), eventIDs(young)...)) {
		t.Errorf("older than 0s: %v, want all 5", ids(l))
	}
	// Days are accepted: the clock is an hour ahead, so nothing is a day old.
	b.call("GET", "/admin/events?older_than=1d", http.StatusOK, &l)
	if len(l.Events) != 0 {
		t.Errorf("older than 1d: %v", ids(l))
	}
	b.clock.Advance(48 * time.Hour)
	b.call("GET", "/admin/events?older_than=2d&limit=4", http.StatusOK, &l)
	if len(l.Events) != 4 || l.NextCursor == "" {
		t.Errorf("older than 2d, limit 4: %v next %q, want 4 and a cursor", ids(l), l.NextCursor)
	}
}

func TestEventDetail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := outbox.NewRegistry()
	reg.Handle("note", "index", func(context.Context, outbox.Event) error { return nil })
	reg.Handle("note", "notify", func(context.Context, outbox.Event) error {
		return outbox.Permanent(errors.New("remote said 403"))
	})
	b.startWorker(reg, 5)
	ev := b.enqueue(outbox.Event{Type: "note", Target: "c.example", Payload: json.RawMessage(`{"text":"hello","n":1}`)})[0]
	row := b.waitStatus(ev.ID, outbox.StatusDeadLettered)

	for _, ref := range []string{ev.ID, strings.ToUpper(ev.ID), strconv.FormatInt(row.ID, 10)} {
		var d admin.EventDetail
		b.call("GET", "/admin/events/"+ref, http.StatusOK, &d)
		e := d.Event
		if e.EventID != ev.ID || e.RowID != row.ID || e.Type != "note" || e.Host != "c.example" ||
			e.Status != outbox.StatusDeadLettered || e.Attempts != 1 || !strings.Contains(e.LastError, "remote said 403") {
			t.Errorf("%s: event %+v", ref, e)
		}
		var payload map[string]any
		if err := json.Unmarshal(e.Payload, &payload); err != nil || payload["text"] != "hello" {
			t.Errorf("%s: payload %s", ref, e.Payload)
		}
		// The ledger: index done, notify released (no row).
		if len(d.Ledger) != 1 || d.Ledger[0].Handler != "index" || d.Ledger[0].Status != outbox.LedgerDone ||
			d.Ledger[0].ProcessedAt.IsZero() {
			t.Errorf("%s: ledger %+v, want index done", ref, d.Ledger)
		}
		if d.DeliveryAttempts != nil || d.Exhausted != nil {
			t.Errorf("%s: delivery attempts or exhausted records without those components", ref)
		}
	}
	b.wantError("GET", "/admin/events/6f0d9a3c-4f1e-5b8a-9c61-2d7e0b4a8f15", "", http.StatusNotFound, "no event")
	b.wantError("GET", "/admin/events/987654", "", http.StatusNotFound, "no event with row id 987654")
	b.wantError("GET", "/admin/events/not-an-id", "", http.StatusBadRequest, "want an event UUID or a row number")
	b.wantError("GET", "/admin/events/0", "", http.StatusBadRequest, "want an event UUID or a row number")
}

// A dead-lettered event retried through the API runs again with its
// attempts reset and succeeds; the ledger skips the handler that had
// already succeeded.
func TestRetryDeadLetteredThenSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var fixed atomic.Bool
	var steady, flaky atomic.Int32
	reg := outbox.NewRegistry()
	reg.Handle("post", "steady", func(context.Context, outbox.Event) error { steady.Add(1); return nil })
	reg.Handle("post", "flaky", func(context.Context, outbox.Event) error {
		flaky.Add(1)
		if !fixed.Load() {
			return errors.New("connection refused")
		}
		return nil
	})
	b.startWorker(reg, 2)
	ev := b.enqueue(outbox.Event{Type: "post", Target: "d.example"})[0]
	// The first failure is retried after the 5 s backoff on the injected
	// clock; the second is the last attempt.
	waitFor(t, "first failure", func() bool { return b.row(ev.ID).Attempts == 1 })
	b.clock.Advance(outbox.Backoff(1))
	b.waitStatus(ev.ID, outbox.StatusDeadLettered)
	if got := b.row(ev.ID); got.Attempts != 2 {
		t.Fatalf("dead-lettered after %d attempts, want 2", got.Attempts)
	}
	// Retrying something that is not dead-lettered is a conflict.
	other := b.enqueue(outbox.Event{Type: "unhandled"})[0]
	b.wantError("POST", "/admin/events/"+other.ID+"/retry", "", http.StatusConflict, "not dead_lettered")

	fixed.Store(true)
	var res admin.ActionResult
	b.call("POST", "/admin/events/"+ev.ID+"/retry", http.StatusOK, &res)
	if res.Action != "retry" || res.EventID != ev.ID {
		t.Errorf("retry answered %+v", res)
	}
	row := b.waitStatus(ev.ID, outbox.StatusDone)
	if row.Attempts != 0 {
		t.Errorf("attempts after a successful retry = %d, want 0 (reset)", row.Attempts)
	}
	if s, f := steady.Load(), flaky.Load(); s != 1 || f != 3 {
		t.Errorf("steady ran %d times, flaky %d; want 1 and 3", s, f)
	}
	recs := b.logs.records("admin: event retried")
	if len(recs) != 1 || recs[0]["event_id"] != ev.ID || recs[0]["count"] != float64(1) || recs[0]["level"] != "INFO" {
		t.Errorf("retry log %v", recs)
	}
	b.wantError("POST", "/admin/events/"+ev.ID+"/retry", "", http.StatusConflict, "is done")
	b.wantError("POST", "/admin/events/6f0d9a3c-4f1e-5b8a-9c61-2d7e0b4a8f15/retry", "", http.StatusNotFound, "no event")
	b.wantError("GET", "/admin/events/"+ev.ID+"/retry", "", http.StatusMethodNotAllowed, "GET is not allowed")
}

func TestRetryFilteredSet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var fixed atomic.Bool
	reg := outbox.NewRegistry()
	for _, typ := range []string{"a", "b"} {
		reg.Handle(typ, "h", func(context.Context, outbox.Event) error {
			if fixed.Load() {
				return nil
			}
			return outbox.Permanent(errors.New("no"))
		})
	}
	b.startWorker(reg, 3)
	as := b.enqueue(append(events(3, "a", "x.example"), events(2, "a", "y.example")...)...)
	bs := b.enqueue(events(2, "b", "x.example")...)
	for _, e := range append(append([]outbox.Event{}, as...), bs...) {
		b.waitStatus(e.ID, outbox.StatusDeadLettered)
	}
	var res admin.RetryResult
	b.call("POST", "/admin/events/retry?type=a&dry_run=true", http.StatusOK, &res)
	if res.Matched != 5 || res.Retried != 0 || !res.DryRun {
		t.Errorf("dry run: %+v, want 5 matched and none retried", res)
	}
	for _, e := range as {
		if b.row(e.ID).Status != outbox.StatusDeadLettered {
			t.Fatal("a dry run changed a row")
		}
	}
	fixed.Store(true)
	res = admin.RetryResult{}
	b.call("POST", "/admin/events/retry?type=a&host=x.example&limit=2", http.StatusOK, &res)
	if res.Matched != 2 || res.Retried != 2 || res.NextCursor == "" {
		t.Errorf("limited retry: %+v, want 2 retried and a cursor", res)
	}
	res = admin.RetryResult{}
	b.call("POST", "/admin/events/retry?type=a&host=x.example&status=dead_lettered", http.StatusOK, &res)
	if res.Matched != 1 || res.Retried != 1 || res.NextCursor != "" {
		t.Errorf("rest: %+v, want 1", res)
	}
	for _, e := range as[:3] {
		b.waitStatus(e.ID, outbox.StatusDone)
	}
	for _, e := range append(append([]outbox.Event{}, as[3:]...), bs...) {
		if s := b.row(e.ID).Status; s != outbox.StatusDeadLettered {
			t.Errorf("event outside the filter is %s", s)
		}
	}
	recs := b.logs.records("admin: dead-lettered events retried")
	if len(recs) != 2 || recs[0]["count"] != float64(2) || recs[0]["type"] != "a" || recs[0]["host"] != "x.example" {
		t.Errorf("bulk retry logs %v", recs)
	}
	b.wantError("POST", "/admin/events/retry?status=pending", "", http.StatusBadRequest, "only dead_lettered")
	b.wantError("POST", "/admin/events/retry?dry_run=perhaps", "", http.StatusBadRequest, "dry_run")
	b.wantError("POST", "/admin/events/retry?limit=10001", "", http.StatusBadRequest, "limit")
	b.wantError("POST", "/admin/events/retry?typ=a", "", http.StatusBadRequest, "unknown parameter")
}

func TestDiscard(t *testing.T) {
	t.Parallel()
	b := setup(t)
	evs := b.enqueue(events(3, "x", "a.example")...)
	claimed, err := b.queue.Claim(b.ctx, 1, time.Minute)
	if err != nil || len(claimed) != 1 || claimed[0].Event.ID != evs[0].ID {
		t.Fatalf("claim: %v %+v", err, claimed)
	}
	b.wantError("POST", "/admin/events/"+evs[0].ID+"/discard", "", http.StatusConflict, "is processing")
	var res admin.ActionResult
	b.call("POST", "/admin/events/"+evs[1].ID+"/discard", http.StatusOK, &res)
	if res.Action != "discard" || res.EventID != evs[1].ID {
		t.Errorf("discard answered %+v", res)
	}
	b.wantError("GET", "/admin/events/"+evs[1].ID, "", http.StatusNotFound, "no event")
	b.wantError("POST", "/admin/events/"+evs[1].ID+"/discard", "", http.StatusNotFound, "no event")
	var l admin.EventList
	b.call("GET", "/admin/events", http.StatusOK, &l)
	if !slices.Equal(ids(l), []string{evs[0].ID, evs[2].ID}) {
		t.Errorf("after discard: %v", ids(l))
	}
	if recs := b.logs.records("admin: event discarded"); len(recs) != 1 || recs[0]["event_id"] != evs[1].ID {
		t.Errorf("discard logs %v", recs)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(events(3, "x", "")...)
	b.enqueue(events(2, "y", "")...)
	if _, err := b.queue.Claim(b.ctx, 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	var s admin.Stats
	b.call("GET", "/admin/stats", http.StatusOK, &s)
	if s.Totals["pending"] != 3 || s.Totals["processing"] != 2 || s.Counts["pending"]["y"] != 2 ||
		s.Counts["processing"]["x"] != 2 || s.Stuck != 0 || s.LeaseSeconds != 600 {
		t.Errorf("stats %+v", s)
	}
	b.clock.Advance(601 * time.Second)
	b.call("GET", "/admin/stats", http.StatusOK, &s)
	if s.Stuck != 2 {
		t.Errorf("stuck after the lease = %d, want 2", s.Stuck)
	}
}

func TestDomainBlocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var l admin.DomainBlockList
	b.call("GET", "/admin/domain-blocks", http.StatusOK, &l)
	if l.DomainBlocks == nil || len(l.DomainBlocks) != 0 {
		t.Errorf("empty list = %#v, want []", l.DomainBlocks)
	}
	var blk admin.DomainBlock
	b.callBody("POST", "/admin/domain-blocks", `{"domain":"Spam.Example.","reason":"  spam waves  "}`, http.StatusCreated, &blk)
	if blk.Domain != "spam.example" || blk.Reason != "spam waves" {
		t.Errorf("added %+v", blk)
	}
	b.callBody("POST", "/admin/domain-blocks", `{"domain":"https://bad.example/users/x"}`, http.StatusCreated, &blk)
	if blocked, err := b.st.IsDomainBlocked(b.ctx, "sub.spam.example"); err != nil || !blocked {
		t.Errorf("store does not see the block: %v %v", blocked, err)
	}
	b.call("GET", "/admin/domain-blocks", http.StatusOK, &l)
	if len(l.DomainBlocks) != 2 || l.DomainBlocks[0].Domain != "bad.example" || l.DomainBlocks[1].Reason != "spam waves" ||
		l.DomainBlocks[1].CreatedAt.IsZero() {
		t.Errorf("list %+v", l.DomainBlocks)
	}
	for body, sub := range map[string]string{
		`{"domain":""}`:                  "want a domain name",
		`{"domain":"a b"}`:               "want a domain name",
		`{"domain":"x.example","why":1}`: "unknown field",
		`{"domain":`:                     "body",
		`{"domain":"x.example"} {}`:      "trailing data",
		`[]`:                             "body",
		`{"domain":"x.example","reason":"` + strings.Repeat("r", 1001) + `"}`: "reason is longer",
	} {
		b.wantError("POST", "/admin/domain-blocks", body, http.StatusBadRequest, sub)
	}
	b.wantError("POST", "/admin/domain-blocks", "", http.StatusBadRequest, "empty body")
	b.wantError("POST", "/admin/domain-blocks", `{"domain":"`+strings.Repeat("a", 70<<10)+`"}`,
		http.StatusRequestEntityTooLarge, "over")
	var res admin.ActionResult
	b.call("DELETE", "/admin/domain-blocks/SPAM.example", http.StatusOK, &res)
	if res.Domain != "spam.example" {
		t.Errorf("remove answered %+v", res)
	}
	b.wantError("DELETE", "/admin/domain-blocks/spam.example", "", http.StatusNotFound, "not blocked")
	b.call("GET", "/admin/domain-blocks", http.StatusOK, &l)
	if len(l.DomainBlocks) != 1 {
		t.Errorf("after remove: %+v", l.DomainBlocks)
	}
	if n := len(b.logs.records("admin: domain blocked")); n != 2 {
		t.Errorf("%d block logs, want 2", n)
	}
	if n := len(b.logs.records("admin: domain unblocked")); n != 1 {
		t.Errorf("%d unblock logs, want 1", n)
	}
}

func TestComponentsNotConfigured(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, p := range []struct{ method, path, sub string }{
		{"GET", "/admin/jetstream/exhausted", "JetStream is not in use"},
		{"POST", "/admin/jetstream/exhausted/1/replay", "JetStream is not in use"},
		{"POST", "/admin/events/6f0d9a3c-4f1e-5b8a-9c61-2d7e0b4a8f15/replay", "JetStream is not in use"},
		{"GET", "/admin/hosts", "host health is not available"},
		{"GET", "/admin/hosts/a.example", "host health is not available"},
		{"POST", "/admin/hosts/a.example/drain", "host health is not available"},
		{"GET", "/admin/activities/6f0d9a3c-4f1e-5b8a-9c61-2d7e0b4a8f15", "delivery status is not available"},
		{"GET", "/admin/inbound", "inbound view is not available"},
	} {
		if e := b.wantError(p.method, p.path, "", http.StatusConflict, p.sub); e.Code != admin.EUNAVAILABLE {
			t.Errorf("%s %s: code %s", p.method, p.path, e.Code)
		}
	}
}

func TestStatusOfEveryCode(t *testing.T) {
	t.Parallel()
	for code, want := range map[admin.Code]int{
		admin.EINVALID:      http.StatusBadRequest,
		admin.EUNAUTHORIZED: http.StatusUnauthorized,
		admin.ENOTFOUND:     http.StatusNotFound,
		admin.EDISABLED:     http.StatusNotFound,
		admin.EMETHOD:       http.StatusMethodNotAllowed,
		admin.ECONFLICT:     http.StatusConflict,
		admin.ECONFIRM:      http.StatusConflict,
		admin.EUNAVAILABLE:  http.StatusConflict,
		admin.ETOOLARGE:     http.StatusRequestEntityTooLarge,
		admin.ETHROTTLED:    http.StatusTooManyRequests,
		admin.EINTERNAL:     http.StatusInternalServerError,
		admin.Code("other"): http.StatusInternalServerError,
	} {
		if got := admin.Status(code); got != want {
			t.Errorf("Status(%s) = %d, want %d", code, got, want)
		}
	}
	if !errors.Is(fmt.Errorf("wrapped: %w", &admin.Error{Code: admin.ENOTFOUND, Message: "x"}), admin.ErrNotFound) {
		t.Error("a not-found *Error does not match ErrNotFound")
	}
	if errors.Is(&admin.Error{Code: admin.ECONFLICT}, admin.ErrNotFound) {
		t.Error("a conflict matches ErrNotFound")
	}
}
