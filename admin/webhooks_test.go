package admin_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/admin"
	"github.com/courier-ap/courier/app/webhook"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
)

// setupWebhooks serves the admin API with a real webhook service.
func setupWebhooks(t *testing.T) *bundle {
	return setup(t, func(b *bundle, cfg *admin.Config) {
		svc, err := webhook.New(webhook.Config{DB: b.db, Now: b.clock.Now, Logger: cfg.Logger})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Webhooks = svc
	})
}

// The webhook endpoints of the API: add answers the secret once, list and
// show never carry it, rotate answers a new one, test enqueues a
// webhook.test event to the endpoint's host key, remove forgets it; bad
// input is refused by code, and no secret is ever logged.
func TestAPIWebhooks(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t)
	if _, _, err := b.st.CreateActor(b.ctx, store.NewActor{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	var added admin.WebhookSecret
	raw := b.callBody(http.MethodPost, "/admin/webhooks", `{"url":"http://127.0.0.1:3000/hooks","actor":"alice","events":["activity.create","follow.requested"]}`,
		http.StatusCreated, &added)
	if !strings.HasPrefix(added.Secret, "whsec_") || added.ID == 0 || added.Actor != "alice" ||
		added.Host != webhook.HostKey(added.ID) || added.Health.State != "healthy" || len(added.Events) != 2 {
		t.Fatalf("add: %s", raw)
	}
	raw = b.call(http.MethodGet, "/admin/webhooks", http.StatusOK, nil)
	if strings.Contains(string(raw), added.Secret) || strings.Contains(string(raw), "whsec_") {
		t.Fatalf("list shows a secret: %s", raw)
	}
	var list admin.WebhookList
	b.call(http.MethodGet, "/admin/webhooks", http.StatusOK, &list)
	if len(list.Webhooks) != 1 || list.Webhooks[0].URL != "http://127.0.0.1:3000/hooks" || list.Webhooks[0].Secrets != 1 {
		t.Fatalf("list: %+v", list)
	}
	var rotated admin.WebhookSecret
	b.call(http.MethodPost, "/admin/webhooks/1/rotate", http.StatusOK, &rotated)
	if rotated.Secret == added.Secret || !strings.HasPrefix(rotated.Secret, "whsec_") || rotated.Secrets != 2 ||
		!rotated.OldSecretsUntil.Equal(b.clock.Now().Add(webhook.DefaultRotateGrace)) {
		t.Fatalf("rotate: %+v", rotated)
	}
	var res admin.ActionResult
	b.call(http.MethodPost, "/admin/webhooks/1/test", http.StatusAccepted, &res)
	row := b.row(res.EventID)
	if row.Event.Type != webhook.EventPost || row.Event.Target != webhook.HostKey(1) || row.Status != outbox.StatusPending {
		t.Fatalf("test event row: %+v", row)
	}
	for _, tc := range []struct {
		method, path, body string
		status             int
		sub                string
	}{
		{http.MethodPost, "/admin/webhooks", `{"url":"ftp://x.example/"}`, http.StatusBadRequest, "http or https"},
		{http.MethodPost, "/admin/webhooks", `{"url":""}`, http.StatusBadRequest, "url is required"},
		{http.MethodPost, "/admin/webhooks", `{"url":"http://a.example/","actor":"nobody"}`, http.StatusNotFound, "nobody"},
		{http.MethodPost, "/admin/webhooks", `{"url":"http://a.example/","events":["activity.nope"]}`, http.StatusBadRequest, "activity.nope"},
		{http.MethodPost, "/admin/webhooks", `{"url":"http://a.example/","secret":"x"}`, http.StatusBadRequest, ""},
		{http.MethodGet, "/admin/webhooks/abc", "", http.StatusBadRequest, "endpoint number"},
		{http.MethodGet, "/admin/webhooks/9", "", http.StatusNotFound, "no webhook endpoint 9"},
		{http.MethodDelete, "/admin/webhooks/9", "", http.StatusNotFound, "no webhook endpoint 9"},
		{http.MethodPost, "/admin/webhooks/9/rotate", "", http.StatusNotFound, "no webhook endpoint 9"},
		{http.MethodPost, "/admin/webhooks/9/test", "", http.StatusNotFound, "no webhook endpoint 9"},
	} {
		b.wantError(tc.method, tc.path, tc.body, tc.status, tc.sub)
	}
	b.call(http.MethodDelete, "/admin/webhooks/1", http.StatusOK, &res)
	b.call(http.MethodGet, "/admin/webhooks", http.StatusOK, &list)
	if len(list.Webhooks) != 0 {
		t.Fatalf("list after remove: %+v", list)
	}
	b.logs.mu.Lock()
	logs := b.logs.buf.String()
	b.logs.mu.Unlock()
	if strings.Contains(logs, "whsec_") || strings.Contains(logs, added.Secret[6:]) || strings.Contains(logs, rotated.Secret[6:]) {
		t.Fatal("a secret was logged")
	}
	if len(b.logs.records("admin: webhook endpoint added")) != 1 {
		t.Fatal("the add was not logged")
	}
}

// Without a webhook service the endpoints answer 409.
func TestAPIWebhooksOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.wantError(http.MethodGet, "/admin/webhooks", "", http.StatusConflict, "webhooks are not available")
}

// The CLI: add prints the secret once, list does not, bad input exits 2
// or 1 with one line on stderr.
func TestCLIWebhooks(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t)
	if _, _, err := b.st.CreateActor(b.ctx, store.NewActor{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := b.cli("webhooks", "add", "http://127.0.0.1:3000/hooks", "--actor", "alice", "--events", "activity.create,activity.like")
	if code != 0 || errOut != "" || !strings.Contains(out, "secret: whsec_") || !strings.Contains(out, "only this once") {
		t.Fatalf("add: %d %q\n%s", code, errOut, out)
	}
	secret := out[strings.Index(out, "whsec_"):]
	secret = secret[:strings.IndexByte(secret, '\n')]
	code, out, errOut = b.cli("webhooks")
	ls := lines(out)
	if code != 0 || errOut != "" || len(ls) != 2 || strings.Contains(out, secret) {
		t.Fatalf("list: %d %q\n%s", code, errOut, out)
	}
	if c := columns(ls[1]); c[0] != "1" || c[2] != "alice" || c[3] != "activity.create,activity.like" || c[4] != "healthy" ||
		c[len(c)-1] != webhook.HostKey(1) {
		t.Fatalf("list row %q", ls[1])
	}
	code, out, _ = b.cli("webhooks", "rotate", "1")
	if code != 0 || !strings.Contains(out, "secret: whsec_") || strings.Contains(out, secret) {
		t.Fatalf("rotate: %d\n%s", code, out)
	}
	if code, out, _ = b.cli("webhooks", "test", "1"); code != 0 || !strings.Contains(out, "test event") {
		t.Fatalf("test: %d\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		code int
		sub  string
	}{
		{[]string{"webhooks", "add"}, 2, "usage: courier admin webhooks add URL"},
		{[]string{"webhooks", "remove", "x"}, 2, "endpoint number"},
		{[]string{"webhooks", "add", "ftp://x/"}, 1, "http or https"},
		{[]string{"webhooks", "add", "http://x.example/", "--actor", "nobody"}, 1, "nobody"},
		{[]string{"webhooks", "remove", "7"}, 1, "no webhook endpoint 7"},
	} {
		code, out, errOut := b.cli(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.sub) || out != "" || len(lines(errOut)) > 2 {
			t.Errorf("%v: %d %q %q, want %d and %q", tc.args, code, out, errOut, tc.code, tc.sub)
		}
	}
	if code, out, _ = b.cli("webhooks", "remove", "1"); code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("remove: %d\n%s", code, out)
	}
}

// Removing an endpoint settles what it leaves: its queued events are
// discarded (the answer says how many) and its host row goes, so it does
// not stay in the hosts' listing as failing.
func TestAPIWebhookRemoveSettles(t *testing.T) {
	t.Parallel()
	var svc *delivery.Service
	b := setup(t, func(b *bundle, c *admin.Config) {
		hooks, err := webhook.New(webhook.Config{DB: b.db, Now: b.clock.Now, Logger: c.Logger})
		if err != nil {
			t.Fatal(err)
		}
		c.Webhooks = hooks
		fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{
			Client: activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true}),
			Signer: activitypub.Signer{KeyID: "https://courier.example/actor#main-key", Key: instanceKey(t)},
			Now:    b.clock.Now,
		})
		if err != nil {
			t.Fatal(err)
		}
		resolver, err := activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: b.st, Now: b.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		svc, err = delivery.New(delivery.Config{DB: b.db, Store: b.st, Resolver: resolver, BaseURL: "https://courier.example",
			Now: b.clock.Now, Channels: []delivery.Channel{hooks}})
		if err != nil {
			t.Fatal(err)
		}
		ds := admin.NewDeliveryState(svc, b.queue)
		c.Hosts, c.Deliveries = ds, ds
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var added admin.WebhookSecret
	b.callBody(http.MethodPost, "/admin/webhooks", `{"url":"http://127.0.0.1:3000/hooks"}`, http.StatusCreated, &added)
	host := webhook.HostKey(added.ID)
	var res admin.ActionResult
	b.call(http.MethodPost, "/admin/webhooks/1/test", http.StatusAccepted, &res)
	// A failing endpoint has a host row; pausing it makes one here.
	b.callBody(http.MethodPost, "/admin/hosts/"+host+"/pause", `{"reason":"failing"}`, http.StatusOK, nil)
	b.call(http.MethodGet, "/admin/hosts/"+host, http.StatusOK, nil)
	var removed admin.ActionResult
	b.call(http.MethodDelete, "/admin/webhooks/1", http.StatusOK, &removed)
	if removed.Count == nil || *removed.Count != 1 || !strings.Contains(removed.Message, "1 queued events discarded") {
		t.Fatalf("remove: %+v", removed)
	}
	if rs, err := b.queue.List(b.ctx, outbox.Filter{Target: host}); err != nil || len(rs) != 0 {
		t.Fatalf("the endpoint's rows after remove: %+v, %v", rs, err)
	}
	b.wantError(http.MethodGet, "/admin/hosts/"+host, "", http.StatusNotFound, "")
}
