package delivery_test

import (
	"crypto"
	"crypto/ed25519"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// schemeRemote is an inbox on 127.0.0.1 that accepts only the signature
// schemes it is told to: a POST signed otherwise gets 401, as Mastodon
// before 4.5 answers RFC 9421 and Fedify answers what it cannot verify. A
// POST in an accepted scheme is verified (activitypub's verifiers, with
// the keys of courier's actors) and answered 202; one that fails
// verification is reported as a test error.
type schemeRemote struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	accepts map[delivery.Scheme]bool
	keys    map[string]crypto.PublicKey
	got     []delivery.Scheme // the scheme of every POST, in order
	status  int               // when set, the answer to every POST
}

func newSchemeRemote(t *testing.T, accepts ...delivery.Scheme) *schemeRemote {
	rm := &schemeRemote{t: t, accepts: map[delivery.Scheme]bool{}, keys: map[string]crypto.PublicKey{}}
	for _, s := range accepts {
		rm.accepts[s] = true
	}
	rm.srv = httptest.NewServer(http.HandlerFunc(rm.serve))
	t.Cleanup(rm.srv.Close)
	return rm
}

func (rm *schemeRemote) host() string { return strings.TrimPrefix(rm.srv.URL, "http://") }

// trust makes the remote know a's RSA and Ed25519 keys.
func (rm *schemeRemote) trust(t *testing.T, a *store.Actor) {
	key, err := activitypub.ParsePrivateKeyPEM(a.PrivateKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	rm.keys[activitypub.KeyID(a.URI)] = &key.PublicKey
	rm.keys[activitypub.Ed25519KeyID(a.URI)] = a.Ed25519Key.Public()
}

func (rm *schemeRemote) schemes() []delivery.Scheme {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	return slices.Clone(rm.got)
}

func (rm *schemeRemote) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	scheme := delivery.SchemeCavage
	if r.Header.Get("Signature-Input") != "" {
		scheme = delivery.SchemeRFC9421
		if strings.Contains(r.Header.Get("Signature-Input"), `alg="ed25519"`) {
			scheme = delivery.SchemeRFC9421Ed25519
		}
	}
	rm.mu.Lock()
	rm.got = append(rm.got, scheme)
	accepted, status := rm.accepts[scheme], rm.status
	rm.mu.Unlock()
	if status != 0 {
		w.WriteHeader(status)
		return
	}
	if !accepted {
		http.Error(w, "signature scheme not supported", http.StatusUnauthorized)
		return
	}
	p, err := activitypub.RequestSignature(r)
	if err == nil {
		rm.mu.Lock()
		pub := rm.keys[p.KeyID]
		rm.mu.Unlock()
		err = fmt.Errorf("unknown key %s", p.KeyID)
		if pub != nil {
			// The remote's clock is the real one: SignRequest and
			// SignMessage date requests by the service's test clock, an
			// hour ahead, inside the hour's window.
			err = activitypub.VerifySignature(r, p, body, pub, activitypub.VerifyOptions{Window: 2 * 60 * 60 * 1e9})
		}
		if err == nil && p.IsMessageSignature() != (scheme != delivery.SchemeCavage) {
			err = fmt.Errorf("scheme %s parsed as message signature %v", scheme, p.IsMessageSignature())
		}
		if _, isEd := pub.(ed25519.PublicKey); err == nil && isEd != (scheme == delivery.SchemeRFC9421Ed25519) {
			err = fmt.Errorf("scheme %s signed with key %s", scheme, p.KeyID)
		}
	}
	if err != nil {
		rm.t.Errorf("remote: %s POST does not verify: %v", scheme, err)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// deliverNote creates a public note by a, followed on rm, runs it through
// the real worker, and waits until its delivery row is settled.
func (b *bundle) deliverNote(a *store.Actor, rm *schemeRemote, status string) {
	b.t.Helper()
	before := len(b.rows(delivery.EventPost))
	if _, _, err := notetest.Create(b.ctx, b.st, a, notetest.Input{Content: "<p>hi</p>",
		To: []string{activitypub.Public}, CC: []string{b.st.URIs().Followers(a.Name)}}); err != nil {
		b.t.Fatal(err)
	}
	b.waitTicking("delivery settled", func() bool {
		rows := b.rows(delivery.EventPost)
		for _, r := range rows {
			if r.Status != outbox.StatusDone && r.Status != outbox.StatusDeadLettered {
				return false
			}
		}
		return len(rows) > before
	})
	rows := b.rows(delivery.EventPost)
	if last := rows[len(rows)-1]; last.Status != status {
		b.t.Fatalf("delivery %s, want %s (%s)", last.Status, status, last.LastError)
	}
}

func schemeSetup(t *testing.T, accepts ...delivery.Scheme) (*bundle, *store.Actor, *schemeRemote) {
	b := setup(t)
	alice := b.actor("alice")
	rm := newSchemeRemote(t, accepts...)
	rm.trust(t, alice)
	b.follower(alice, rm.srv.URL+"/users/bob", rm.srv.URL+"/users/bob/inbox", rm.srv.URL+"/inbox")
	b.startWorker(2)
	return b, alice, rm
}

func wantSchemes(t *testing.T, what string, got []delivery.Scheme, want ...delivery.Scheme) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: POSTs signed %v, want %v", what, got, want)
	}
}

func wantOrder(t *testing.T, b *bundle, host string, want ...delivery.Scheme) delivery.SchemeStatus {
	t.Helper()
	st, _, err := b.svc.Schemes().Status(b.ctx, host)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Order, want) {
		t.Fatalf("order %v, want %v (%+v)", st.Order, want, st)
	}
	return st
}

// TestSchemeUnknownHostGetsCavage: a host courier knows nothing of gets
// draft-cavage, one POST, and nothing is learnt from its 202.
func TestSchemeUnknownHostGetsCavage(t *testing.T) {
	t.Parallel()
	b, alice, rm := schemeSetup(t, delivery.SchemeCavage)
	b.deliverNote(alice, rm, outbox.StatusDone)
	wantSchemes(t, "unknown host", rm.schemes(), delivery.SchemeCavage)
	if _, found, err := b.svc.Schemes().Status(b.ctx, rm.host()); err != nil || found {
		t.Fatalf("learnt from a draft-cavage 202: found %v, %v", found, err)
	}
}

// TestSchemeFallbackLearnsRFC9421: a host that refuses draft-cavage with
// 401 gets RFC 9421 (RSA) at once, in the same attempt; that success is
// remembered, so the next delivery goes RFC 9421 first, with Ed25519,
// which the host accepts and which is remembered too.
func TestSchemeFallbackLearnsRFC9421(t *testing.T) {
	t.Parallel()
	b, alice, rm := schemeSetup(t, delivery.SchemeRFC9421, delivery.SchemeRFC9421Ed25519)
	b.deliverNote(alice, rm, outbox.StatusDone)
	wantSchemes(t, "first delivery", rm.schemes(), delivery.SchemeCavage, delivery.SchemeRFC9421)
	st := wantOrder(t, b, rm.host(), delivery.SchemeRFC9421Ed25519, delivery.SchemeRFC9421, delivery.SchemeCavage)
	if st.RFC9421 != "accepted" || st.LearnedFrom != "delivery" || st.RFC9421Until == nil {
		t.Fatalf("status %+v", st)
	}
	b.deliverNote(alice, rm, outbox.StatusDone)
	wantSchemes(t, "second delivery", rm.schemes()[2:], delivery.SchemeRFC9421Ed25519)
	if st := wantOrder(t, b, rm.host(), delivery.SchemeRFC9421Ed25519, delivery.SchemeRFC9421, delivery.SchemeCavage); st.Ed25519 != "accepted" {
		t.Fatalf("status %+v", st)
	}
	// A worker restart reads it back from the database.
	b.restart()
	wantOrder(t, b, rm.host(), delivery.SchemeRFC9421Ed25519, delivery.SchemeRFC9421, delivery.SchemeCavage)
	// Past SchemeMemory the host is unknown again.
	b.clock.Advance(delivery.SchemeMemory + delivery.DefaultHostCacheTTL)
	wantOrder(t, b, rm.host(), delivery.SchemeCavage, delivery.SchemeRFC9421)
}

// TestSchemeInboundThenEd25519Refused: a host that sent a verified RFC
// 9421 signature (the inbox reports it) gets RFC 9421 first; it refuses
// Ed25519 with 401 and accepts RSA, which the next delivery uses directly.
func TestSchemeInboundThenEd25519Refused(t *testing.T) {
	t.Parallel()
	b, alice, rm := schemeSetup(t, delivery.SchemeRFC9421, delivery.SchemeCavage)
	b.svc.Schemes().AcceptsRFC9421(b.ctx, rm.host(), activitypub.AlgRSAv15SHA256)
	if st := wantOrder(t, b, rm.host(), delivery.SchemeRFC9421Ed25519, delivery.SchemeRFC9421, delivery.SchemeCavage); st.LearnedFrom != "inbound" {
		t.Fatalf("status %+v", st)
	}
	b.deliverNote(alice, rm, outbox.StatusDone)
	wantSchemes(t, "first delivery", rm.schemes(), delivery.SchemeRFC9421Ed25519, delivery.SchemeRFC9421)
	if st := wantOrder(t, b, rm.host(), delivery.SchemeRFC9421, delivery.SchemeCavage); st.Ed25519 != "refused" {
		t.Fatalf("status %+v", st)
	}
	b.deliverNote(alice, rm, outbox.StatusDone)
	wantSchemes(t, "second delivery", rm.schemes()[2:], delivery.SchemeRFC9421)
}

// TestSchemeRFC9421Refused: a host wrongly believed to take RFC 9421
// refuses both forms with 401 and accepts draft-cavage; RFC 9421 is then
// remembered as refused and the next delivery is draft-cavage alone.
func TestSchemeRFC9421Refused(t *testing.T) {
	t.Parallel()
	b, alice, rm := schemeSetup(t, delivery.SchemeCavage)
	b.svc.Schemes().AcceptsRFC9421(b.ctx, rm.host(), activitypub.AlgEd25519)
	wantOrder(t, b, rm.host(), delivery.SchemeRFC9421Ed25519, delivery.SchemeRFC9421, delivery.SchemeCavage)
	b.deliverNote(alice, rm, outbox.StatusDone)
	wantSchemes(t, "first delivery", rm.schemes(), delivery.SchemeRFC9421Ed25519, delivery.SchemeRFC9421, delivery.SchemeCavage)
	if st := wantOrder(t, b, rm.host(), delivery.SchemeCavage); st.RFC9421 != "refused" || st.Ed25519 != "" {
		t.Fatalf("status %+v", st)
	}
	b.deliverNote(alice, rm, outbox.StatusDone)
	wantSchemes(t, "second delivery", rm.schemes()[3:], delivery.SchemeCavage)
	list, err := b.svc.Schemes().List(b.ctx, "", 10)
	if err != nil || len(list) != 1 || list[0].Host != rm.host() || list[0].RFC9421 != "refused" {
		t.Fatalf("list %+v, %v", list, err)
	}
	if err := b.svc.Schemes().Forget(b.ctx, rm.host()); err != nil {
		t.Fatal(err)
	}
	wantOrder(t, b, rm.host(), delivery.SchemeCavage, delivery.SchemeRFC9421)
}

// TestSchemeRefusingEverythingStopsFallback: a host that answers 400 to
// every scheme gets one fallback on the first delivery, which ends as the
// 400 makes it (dead-lettered); nothing is learnt of its schemes, but that
// falling back does not help it is, so the next delivery is one POST
// (draft-cavage), until NoFallbackMemory has passed.
func TestSchemeRefusingEverythingStopsFallback(t *testing.T) {
	t.Parallel()
	b, alice, rm := schemeSetup(t)
	rm.mu.Lock()
	rm.status = http.StatusBadRequest
	rm.mu.Unlock()
	b.deliverNote(alice, rm, outbox.StatusDeadLettered)
	wantSchemes(t, "first delivery", rm.schemes(), delivery.SchemeCavage, delivery.SchemeRFC9421)
	st := wantOrder(t, b, rm.host(), delivery.SchemeCavage)
	// The test clock ticks while deliveries wait, so the time is bounded.
	if now := b.clock.Now(); st.RFC9421 != "" || st.Ed25519 != "" || st.NoFallbackUntil == nil ||
		st.NoFallbackUntil.After(now.Add(delivery.NoFallbackMemory)) ||
		st.NoFallbackUntil.Before(now.Add(delivery.NoFallbackMemory-time.Hour)) {
		t.Fatalf("status %+v", st)
	}
	list, err := b.svc.Schemes().List(b.ctx, "", 10)
	if err != nil || len(list) != 1 || list[0].NoFallbackUntil == nil || !slices.Equal(list[0].Order, []delivery.Scheme{delivery.SchemeCavage}) {
		t.Fatalf("list %+v, %v", list, err)
	}

	b.deliverNote(alice, rm, outbox.StatusDeadLettered)
	wantSchemes(t, "second delivery", rm.schemes()[2:], delivery.SchemeCavage)

	// A worker restart reads it back from the database.
	b.restart()
	wantOrder(t, b, rm.host(), delivery.SchemeCavage)
	// Past NoFallbackMemory the fallback is tried again.
	b.clock.Advance(delivery.NoFallbackMemory + delivery.DefaultHostCacheTTL)
	if st := wantOrder(t, b, rm.host(), delivery.SchemeCavage, delivery.SchemeRFC9421); st.NoFallbackUntil != nil {
		t.Fatalf("status %+v", st)
	}
	b.deliverNote(alice, rm, outbox.StatusDeadLettered)
	wantSchemes(t, "delivery after expiry", rm.schemes()[3:], delivery.SchemeCavage, delivery.SchemeRFC9421)
}

// TestSchemeNoFallbackKeepsOrder: a host known to accept RFC 9421 that
// then answers 400 to all three schemes keeps what is known of its
// schemes, and the next delivery is one POST in the first of them.
func TestSchemeNoFallbackKeepsOrder(t *testing.T) {
	t.Parallel()
	b, alice, rm := schemeSetup(t, delivery.SchemeRFC9421)
	b.svc.Schemes().AcceptsRFC9421(b.ctx, rm.host(), activitypub.AlgRSAv15SHA256)
	rm.mu.Lock()
	rm.status = http.StatusBadRequest
	rm.mu.Unlock()
	b.deliverNote(alice, rm, outbox.StatusDeadLettered)
	wantSchemes(t, "first delivery", rm.schemes(), delivery.SchemeRFC9421Ed25519, delivery.SchemeRFC9421, delivery.SchemeCavage)
	if st := wantOrder(t, b, rm.host(), delivery.SchemeRFC9421Ed25519); st.RFC9421 != "accepted" || st.NoFallbackUntil == nil {
		t.Fatalf("status %+v", st)
	}
	b.deliverNote(alice, rm, outbox.StatusDeadLettered)
	wantSchemes(t, "second delivery", rm.schemes()[3:], delivery.SchemeRFC9421Ed25519)
}
