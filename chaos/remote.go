package chaos

import (
	"context"
	"crypto"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// Behaviour is how a simulated remote host answers.
type Behaviour string

// Behaviours of simulated remote hosts.
const (
	// Healthy hosts verify, record and answer 202 at once.
	Healthy Behaviour = "healthy"
	// Flapping hosts answer a share of POSTs with 503 without recording
	// them, and a smaller share with 502 after recording them (a peer whose
	// proxy gave up after the work was done), so courier sees both retries
	// and redeliveries of what already arrived.
	Flapping Behaviour = "flapping"
	// Slow hosts answer after a random delay that stays below courier's
	// delivery timeout.
	Slow Behaviour = "slow"
	// BlackHole hosts serve their actor documents during set-up; once
	// switched on they accept connections and never answer anything.
	BlackHole Behaviour = "blackhole"
	// Chaotic hosts (the convergence run's) answer a share of POSTs with
	// 500 or with 429 and Retry-After without recording them, record a
	// share and then hold the connection past courier's delivery timeout
	// (so the activity arrived but courier sees a timeout and sends it
	// again), and hold a share without recording until courier gives up.
	// The run also hangs a chaotic host whole for a while (outage), long
	// enough for courier to park its deliveries, then releases it.
	Chaotic Behaviour = "chaotic"
)

// Shares of a chaotic host's failed answers to POSTs (outside outages), as
// parts of its fault rate: 500 (not recorded), 429 with Retry-After (not
// recorded), recorded and then held until courier gives up, held until
// courier gives up without recording.
const (
	chaoticServerError = 0.35
	chaoticTooMany     = 0.35
	chaoticLateTimeout = 0.15
	chaoticHung        = 0.15
)

// maxInboxBody bounds a POST body a simulated inbox reads.
const maxInboxBody = 1 << 20

// post is one verified POST a simulated inbox recorded (answered 2xx, or
// 502 after the work, see Flapping).
type post struct {
	activityID string
	typ        string
	objectID   string
	host       string // host:port of the inbox that got it

	// What the convergence check reads: the activity's actor, the
	// version written in a Create's or Update's object (-1 when none),
	// and for an Undo the type and object of the activity it embeds.
	actor                    string
	version                  int
	undoneType, undoneObject string
}

// recorder keeps every POST the simulated inboxes recorded. It is shared by
// all hosts and safe for concurrent use.
type recorder struct {
	mu            sync.Mutex
	posts         []post
	last          atomic.Int64 // unix nanoseconds of the last recorded or refused POST
	badSignatures atomic.Int64 // POSTs whose signature or digest did not verify
	refused       atomic.Int64 // POSTs answered 503 by flapping hosts
	hung          atomic.Int64 // requests a black hole swallowed
	abandoned     atomic.Int64 // POSTs to slow hosts whose sender gave up first
}

func (r *recorder) add(p post) {
	r.mu.Lock()
	r.posts = append(r.posts, p)
	r.mu.Unlock()
	r.touch(time.Now())
}

func (r *recorder) touch(t time.Time) { r.last.Store(t.UnixNano()) }

// snapshot returns a copy of the posts recorded so far.
func (r *recorder) snapshot() []post {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]post(nil), r.posts...)
}

// lastActivity is when the last POST arrived (zero when none did).
func (r *recorder) lastActivity() time.Time {
	n := r.last.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// keyring resolves courier's signing keys by fetching the actor documents
// they belong to, and caches them: keys never change during a run, and a
// prefetch at set-up keeps inboxes from depending on the server being up.
type keyring struct {
	client *http.Client
	mu     sync.Mutex
	keys   map[string]crypto.PublicKey
}

func newKeyring() *keyring {
	return &keyring{client: &http.Client{Timeout: 5 * time.Second}, keys: map[string]crypto.PublicKey{}}
}

// get returns the public key keyID, fetching its actor document on a miss.
func (k *keyring) get(ctx context.Context, keyID string) (crypto.PublicKey, error) {
	k.mu.Lock()
	pub, ok := k.keys[keyID]
	k.mu.Unlock()
	if ok {
		return pub, nil
	}
	actorURL, _, _ := strings.Cut(keyID, "#")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, actorURL, nil)
	if err != nil {
		return nil, fmt.Errorf("chaos: fetch key %s: %w", keyID, err)
	}
	req.Header.Set("Accept", activitypub.ContentType)
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("chaos: fetch key %s: %w", keyID, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxInboxBody))
	if err != nil {
		return nil, fmt.Errorf("chaos: fetch key %s: %w", keyID, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("chaos: fetch key %s: status %d", keyID, resp.StatusCode)
	}
	a, err := activitypub.ParseActor(body)
	if err != nil {
		return nil, fmt.Errorf("chaos: fetch key %s: %w", keyID, err)
	}
	pk, ok := a.Key(keyID)
	if !ok {
		return nil, fmt.Errorf("chaos: fetch key %s: %w", keyID, activitypub.ErrKeyNotFound)
	}
	pub, err = activitypub.ParsePublicKeyPEM(pk.PublicKeyPem)
	if err != nil {
		return nil, fmt.Errorf("chaos: fetch key %s: %w", keyID, err)
	}
	k.mu.Lock()
	k.keys[keyID] = pub
	k.mu.Unlock()
	return pub, nil
}

// remoteActor is an actor of a simulated remote host, with its own key.
type remoteActor struct {
	host  *remoteHost
	name  string
	id    string
	inbox string
	keyID string
	key   *rsa.PrivateKey
	doc   []byte
}

// sign signs req (whose body is body) as the actor.
func (a *remoteActor) sign(req *http.Request, body []byte, now time.Time) error {
	return activitypub.SignRequest(req, body, a.keyID, a.key, now)
}

// remoteHost is one simulated fediverse server on its own loopback port.
type remoteHost struct {
	behaviour Behaviour
	base      string // http://127.0.0.1:port
	hostport  string // 127.0.0.1:port
	actors    []*remoteActor

	rec    *recorder
	keys   *keyring
	logger *slog.Logger

	failRate   float64        // Flapping: share answered 503 unrecorded
	lateFail   float64        // Flapping: share answered 502 after recording
	refuseMax  int            // Flapping, Chaotic: at most this many failed answers to one activity (0: no bound)
	refusals   map[string]int // activity id -> failed answers so far (under rngMu)
	slowMin    time.Duration  // Slow: least delay
	slowMax    time.Duration  // Slow: most delay
	blackholed atomic.Bool
	hungUntil  atomic.Int64 // unix nanoseconds: every request hangs until then (outage)
	calm       atomic.Bool  // Flapping: answers every POST from now on (calmDown)
	stopped    chan struct{}
	stopOnce   sync.Once

	rngMu sync.Mutex
	rng   *rand.Rand

	srv *http.Server

	notesMu sync.Mutex
	notes   map[string][]byte // note id -> its document, as its Create carried it (serveNote)
}

// keepNote makes the host serve the note doc (its Create's object) at id.
func (h *remoteHost) keepNote(id string, doc []byte) {
	h.notesMu.Lock()
	defer h.notesMu.Unlock()
	if h.notes == nil {
		h.notes = map[string][]byte{}
	}
	h.notes[id] = doc
}

// serveNote answers a GET of one of the host's notes, as a server serves
// its posts: courier fetches one to find the author of a note it has not
// imported (a Like's recipient).
func (h *remoteHost) serveNote(w http.ResponseWriter, r *http.Request) {
	h.notesMu.Lock()
	doc, ok := h.notes[h.base+r.URL.Path]
	h.notesMu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", activitypub.ContentType)
	_, _ = w.Write(doc)
}

// hostOptions configure newRemoteHost.
type hostOptions struct {
	name      string
	behaviour Behaviour
	actors    int
	rec       *recorder
	keys      *keyring
	logger    *slog.Logger
	seed      uint64
	failRate  float64
	lateFail  float64
	refuseMax int
	slowMin   time.Duration
	slowMax   time.Duration
}

// newRemoteHost listens on a fresh loopback port and serves the host's
// actors and inboxes until close.
func newRemoteHost(o hostOptions) (*remoteHost, error) {
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: listen for host %s: %w", o.name, err)
	}
	h := &remoteHost{
		behaviour: o.behaviour, hostport: ln.Addr().String(), base: "http://" + ln.Addr().String(),
		rec: o.rec, keys: o.keys, logger: o.logger,
		failRate: o.failRate, lateFail: o.lateFail, slowMin: o.slowMin, slowMax: o.slowMax,
		refuseMax: o.refuseMax, refusals: map[string]int{},
		stopped: make(chan struct{}),
		rng:     rand.New(rand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15)),
	}
	for i := range o.actors {
		key, err := activitypub.GenerateKey()
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("chaos: key for host %s: %w", o.name, err)
		}
		name := fmt.Sprintf("%s_%d", o.name, i)
		a := &remoteActor{host: h, name: name, id: h.base + "/users/" + name, key: key}
		a.inbox = a.id + "/inbox"
		a.keyID = activitypub.KeyID(a.id)
		pem, err := activitypub.EncodePublicKeyPEM(&key.PublicKey)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("chaos: key for host %s: %w", o.name, err)
		}
		a.doc, err = activitypub.MarshalActorDocument(&activitypub.Actor{
			ID: a.id, Type: "Person", PreferredUsername: name, Name: name,
			Inbox: a.inbox, Outbox: a.id + "/outbox",
			Followers: a.id + "/followers", Following: a.id + "/following",
			SharedInbox: h.base + "/inbox",
			PublicKey:   activitypub.PublicKey{ID: a.keyID, Owner: a.id, PublicKeyPem: pem},
		})
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("chaos: actor document %s: %w", a.id, err)
		}
		h.actors = append(h.actors, a)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /users/{name}", h.serveActor)
	mux.HandleFunc("GET /notes/{id}", h.serveNote)
	mux.HandleFunc("POST /users/{name}/inbox", h.serveInbox)
	mux.HandleFunc("POST /inbox", h.serveInbox)
	h.srv = &http.Server{
		Handler:           h.blackHoleGate(mux),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(o.logger.Handler(), slog.LevelWarn),
	}
	go func() { _ = h.srv.Serve(ln) }() // ends with close
	return h, nil
}

// sharedInbox is the host's shared inbox URL.
func (h *remoteHost) sharedInbox() string { return h.base + "/inbox" }

// blackHole switches a BlackHole host into never answering.
func (h *remoteHost) blackHole() { h.blackholed.Store(true) }

// close stops serving; held requests are released first.
func (h *remoteHost) close() {
	h.stopOnce.Do(func() { close(h.stopped) })
	_ = h.srv.Close()
}

// failure draws how a flapping or chaotic host answers a POST of the
// activity id: a number in [0, 1) whose range decides the answer, or 1
// (answer normally) once the activity was failed refuseMax times. The
// bound keeps courier's backoff, which doubles with each failure, from
// stretching the settle phase of a run that measures order, not patience.
func (h *remoteHost) failure(id string, failShare float64) float64 {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	x := h.rng.Float64()
	if x >= failShare {
		return x
	}
	if h.refuseMax > 0 {
		if h.refusals[id] >= h.refuseMax {
			return 1
		}
		h.refusals[id]++
	}
	return x
}

func (h *remoteHost) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return randBetween(h.rng, lo, hi)
}

// randBetween returns a duration drawn from rng in [lo, hi), or lo when
// the range is empty.
func randBetween(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// blackHoleGate holds every request of a black-holed host until the client
// gives up or the host closes, never answering.
func (h *remoteHost) blackHoleGate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.blackholed.Load() && !h.outage(time.Now()) {
			next.ServeHTTP(w, r)
			return
		}
		h.hang(w, r)
	})
}

// hang holds a request until the client gives up or the host closes,
// never answering.
func (h *remoteHost) hang(w http.ResponseWriter, r *http.Request) {
	h.rec.hung.Add(1)
	select {
	case <-r.Context().Done():
	case <-h.stopped:
	}
	// Hijack and drop the connection so that not even an empty answer
	// is written.
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
		}
	}
}

// hangFor makes the host hang every request for d from now (an outage).
func (h *remoteHost) hangFor(now time.Time, d time.Duration) {
	h.hungUntil.Store(now.Add(d).UnixNano())
}

// outage reports whether the host hangs every request at now.
func (h *remoteHost) outage(now time.Time) bool {
	return now.UnixNano() < h.hungUntil.Load()
}

func (h *remoteHost) actor(name string) *remoteActor {
	for _, a := range h.actors {
		if a.name == name {
			return a
		}
	}
	return nil
}

func (h *remoteHost) serveActor(w http.ResponseWriter, r *http.Request) {
	a := h.actor(r.PathValue("name"))
	if a == nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", activitypub.ContentType)
	_, _ = w.Write(a.doc)
}

// serveInbox verifies courier's signature and digest, then answers as the
// host's behaviour says, recording what it accepted.
func (h *remoteHost) serveInbox(w http.ResponseWriter, r *http.Request) {
	if name := r.PathValue("name"); name != "" && h.actor(name) == nil {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxInboxBody))
	if err != nil {
		http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	keyID, err := activitypub.RequestKeyID(r)
	if err != nil {
		h.refuseSignature(w, "no usable signature", err)
		return
	}
	pub, err := h.keys.get(r.Context(), keyID)
	if err != nil {
		// Courier's keys are fetched at set-up; a miss that cannot be
		// fetched now is the server being down: ask for a retry.
		h.logger.Warn("key fetch", "host", h.hostport, "err", err)
		http.Error(w, "key unavailable", http.StatusServiceUnavailable)
		return
	}
	if err := activitypub.Verify(r, body, pub, activitypub.VerifyOptions{}); err != nil {
		h.refuseSignature(w, "signature does not verify", err)
		return
	}
	act, err := activitypub.ParseActivity(body)
	if err != nil {
		http.Error(w, "not an activity", http.StatusBadRequest)
		return
	}
	if owner, _, _ := strings.Cut(keyID, "#"); owner != act.Actor {
		h.refuseSignature(w, "actor does not own the key", errors.New(owner+" signed for "+act.Actor))
		return
	}
	p := post{
		activityID: act.ID, typ: act.Type, objectID: act.ObjectID,
		host: h.hostport, actor: act.Actor, version: -1,
	}
	p.version, p.undoneType, p.undoneObject = embeddedFields(act.ObjectRaw)
	switch {
	case h.behaviour == Chaotic && !h.calm.Load():
		f := h.failRate
		x := h.failure(act.ID, f)
		switch {
		case x < f*chaoticServerError:
			h.rec.refused.Add(1)
			h.rec.touch(time.Now())
			http.Error(w, "chaotic", http.StatusInternalServerError)
			return
		case x < f*(chaoticServerError+chaoticTooMany):
			h.rec.refused.Add(1)
			h.rec.touch(time.Now())
			w.Header().Set("Retry-After", strconv.Itoa(1+int(x*1000)%3))
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		case x < f*(chaoticServerError+chaoticTooMany+chaoticLateTimeout):
			h.rec.add(p)
			h.hang(w, r)
			return
		case x < f:
			h.hang(w, r)
			return
		}
	case h.behaviour == Flapping && !h.calm.Load():
		x := h.failure(act.ID, h.failRate+h.lateFail)
		if x < h.failRate {
			h.rec.refused.Add(1)
			h.rec.touch(time.Now())
			http.Error(w, "flapping", http.StatusServiceUnavailable)
			return
		}
		if x < h.failRate+h.lateFail {
			h.rec.add(p)
			http.Error(w, "gateway gave up after the work", http.StatusBadGateway)
			return
		}
	case h.behaviour == Slow:
		t := time.NewTimer(h.between(h.slowMin, h.slowMax))
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			h.rec.abandoned.Add(1)
			return // the sender gave up: nothing was accepted
		case <-h.stopped:
			t.Stop()
			return
		}
	}
	h.rec.add(p)
	w.WriteHeader(http.StatusAccepted)
}

// embeddedFields reads, from an activity's object, the version written in
// an embedded object's content (-1 when none) and, when the object is an
// activity (an Undo's), its type and object id.
func embeddedFields(obj json.RawMessage) (version int, typ, object string) {
	var o struct {
		Type    string          `json:"type"`
		Content string          `json:"content"`
		Object  json.RawMessage `json:"object"`
	}
	if len(obj) == 0 || obj[0] != '{' || json.Unmarshal(obj, &o) != nil {
		return -1, "", ""
	}
	var ids []string
	if len(o.Object) > 0 {
		ids = activitypub.IDs(o.Object)
	}
	if len(ids) > 0 {
		object = ids[0]
	}
	return contentVersion(o.Content), o.Type, object
}

func (h *remoteHost) refuseSignature(w http.ResponseWriter, msg string, err error) {
	h.rec.badSignatures.Add(1)
	h.logger.Warn("inbox refused a request", "host", h.hostport, "reason", msg, "err", err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = fmt.Fprintf(w, "{\"error\":%q}\n", msg)
}
