package admin_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/courier-ap/courier/admin"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
)

// TestSignatureSchemes: the per-host signature schemes the delivery
// service learnt are listed and shown per host with the order deliveries
// try them in, and can be forgotten; a host nothing is known of shows the
// default order; a malformed host is 400; without a delivery service the
// endpoints answer 409.
func TestSignatureSchemes(t *testing.T) {
	t.Parallel()
	d := setupDelivery(t)
	d.svc.Schemes().AcceptsRFC9421(d.ctx, "Social.Example", "ed25519")
	d.svc.Schemes().AcceptsRFC9421(d.ctx, "mastodon.example", "rsa-v1_5-sha256")

	var list admin.SignatureList
	d.call(http.MethodGet, "/admin/signatures?limit=1", http.StatusOK, &list)
	if len(list.Hosts) != 1 || list.Hosts[0].Host != "mastodon.example" || list.NextCursor != "mastodon.example" {
		t.Fatalf("first page %+v", list)
	}
	d.call(http.MethodGet, "/admin/signatures?cursor="+list.NextCursor, http.StatusOK, &list)
	if len(list.Hosts) != 1 || list.Hosts[0].Host != "social.example" {
		t.Fatalf("second page %+v", list)
	}
	got := list.Hosts[0]
	want := []delivery.Scheme{delivery.SchemeRFC9421Ed25519, delivery.SchemeRFC9421, delivery.SchemeCavage}
	if got.RFC9421 != "accepted" || got.Ed25519 != "accepted" || got.LearnedFrom != "inbound" ||
		got.RFC9421Until == nil || !slices.Equal(got.Order, want) {
		t.Fatalf("social.example %+v", got)
	}

	var one delivery.SchemeStatus
	d.call(http.MethodGet, "/admin/signatures/mastodon.example", http.StatusOK, &one)
	if one.RFC9421 != "accepted" || one.Ed25519 != "" || !slices.Equal(one.Order, want) {
		t.Fatalf("mastodon.example %+v", one)
	}
	d.call(http.MethodDelete, "/admin/signatures/mastodon.example", http.StatusOK, nil)
	d.call(http.MethodGet, "/admin/signatures/mastodon.example", http.StatusOK, &one)
	if one.RFC9421 != "" || !slices.Equal(one.Order, []delivery.Scheme{delivery.SchemeCavage, delivery.SchemeRFC9421}) {
		t.Fatalf("forgotten mastodon.example %+v", one)
	}
	d.wantError(http.MethodGet, "/admin/signatures/bad%20host", "", http.StatusBadRequest, "host")
	d.wantError(http.MethodGet, "/admin/signatures?limit=x", "", http.StatusBadRequest, "limit")

	// The CLI shows the same.
	code, out, errOut := d.cli("signatures")
	if code != 0 || !strings.Contains(out, "social.example") || !strings.Contains(out, "accepted until") ||
		!strings.Contains(out, "rfc9421-ed25519, rfc9421-rsa, draft-cavage") {
		t.Fatalf("signatures: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = d.cli("signatures", "show", "social.example"); code != 0 || !strings.Contains(out, "inbound") {
		t.Fatalf("signatures show: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = d.cli("signatures", "forget", "social.example"); code != 0 {
		t.Fatalf("signatures forget: %d %q %q", code, out, errOut)
	}
	if code, out, _ = d.cli("signatures"); code != 0 || strings.Contains(out, "social.example") {
		t.Fatalf("after forget: %d %q", code, out)
	}
	if code, _, errOut = d.cli("signatures", "show"); code != 2 || errOut == "" {
		t.Fatalf("show without a host: %d %q", code, errOut)
	}

	plain := setup(t)
	plain.wantError(http.MethodGet, "/admin/signatures", "", http.StatusConflict, "not available")
}

// TestSignatureNoFallbackShown: a host that refused both schemes of a
// delivery's one attempt (400 to draft-cavage and to RFC 9421) is shown
// by the API and the CLI with one scheme in its order and the time until
// which it gets no fallback.
func TestSignatureNoFallbackShown(t *testing.T) {
	t.Parallel()
	d := setupDelivery(t)
	in := newInbox(t, d.publicKey(), d.clock.Now, http.StatusBadRequest)
	d.follower("https://remote.example/users/bob", in.srv.URL+"/users/bob/inbox")
	host := strings.TrimPrefix(in.srv.URL, "http://")
	row := d.deliveryRow(d.note("hello"))
	d.waitStatus(row.Event.ID, outbox.StatusDeadLettered)

	var one delivery.SchemeStatus
	d.call(http.MethodGet, "/admin/signatures/"+host, http.StatusOK, &one)
	if one.NoFallbackUntil == nil || !one.NoFallbackUntil.After(d.clock.Now()) || one.RFC9421 != "" ||
		!slices.Equal(one.Order, []delivery.Scheme{delivery.SchemeCavage}) {
		t.Fatalf("%s %+v", host, one)
	}
	var list admin.SignatureList
	d.call(http.MethodGet, "/admin/signatures", http.StatusOK, &list)
	if len(list.Hosts) != 1 || list.Hosts[0].NoFallbackUntil == nil {
		t.Fatalf("list %+v", list)
	}
	if code, out, errOut := d.cli("signatures", "show", host); code != 0 || !strings.Contains(out, "fallback") ||
		!strings.Contains(out, "none until") {
		t.Fatalf("signatures show: %d %q %q", code, out, errOut)
	}
	if len(in.posts()) != 2 || in.invalid.Load() != 0 {
		t.Fatalf("the inbox got %d verified POSTs and %d others, want 2 (draft-cavage, then RFC 9421)", len(in.posts()), in.invalid.Load())
	}
}
