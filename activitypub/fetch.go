package activitypub

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Fetch errors.
var (
	// ErrGone: the remote answered 410 Gone; callers may drop the actor.
	ErrGone = errors.New("activitypub: gone")
	// ErrNotFound: the remote answered 404.
	ErrNotFound = errors.New("activitypub: not found")
	// ErrIDMismatch: the fetched document's id is not the URL fetched.
	ErrIDMismatch = errors.New("activitypub: document id does not match its URL")
	// ErrContentType: the response is not an ActivityPub document.
	ErrContentType = errors.New("activitypub: not an ActivityPub content type")
	// ErrTooLarge: the response body exceeds the limit.
	ErrTooLarge = errors.New("activitypub: response too large")
	// ErrKeyNotFound: the document at a key id carries no such key, or the
	// key's owner does not list it.
	ErrKeyNotFound = errors.New("activitypub: key not found")
	// ErrBadURL: the URL is not an absolute http(s) URL.
	ErrBadURL = errors.New("activitypub: bad URL")
	// ErrNotActor: a document taken for an actor (fetched from an actor
	// id, or served at a key id as its owner) has no actor type. It
	// matches ErrMalformed too, so callers that give up on a malformed
	// document give up on it.
	ErrNotActor = fmt.Errorf("%w: not an actor", ErrMalformed)
)

// ErrFetchRefused: a FetchHook's Before refused the fetch (its caller's
// budget is spent); nothing was sent.
var ErrFetchRefused = errors.New("activitypub: fetch refused by its caller's budget")

// FetchHook lets the caller of a fetch account for it: Before runs before
// each request a Fetcher sends on ctx's behalf (redirects and a key's owner
// included) and refuses it by returning an error; After reports the bytes
// of each body read. The inbox charges them to the budget of the host
// whose key needs them, so an unverified sender cannot make courier fetch
// without bound.
type FetchHook struct {
	Before func(host string) error
	After  func(host string, n int)
}

type fetchHookKey struct{}

// WithFetchHook returns ctx carrying h for the fetches made with it.
func WithFetchHook(ctx context.Context, h FetchHook) context.Context {
	return context.WithValue(ctx, fetchHookKey{}, h)
}

func fetchHookOf(ctx context.Context) FetchHook {
	h, _ := ctx.Value(fetchHookKey{}).(FetchHook)
	return h
}

// StatusError is a non-2xx answer other than 404 and 410.
type StatusError struct {
	// URL is the URL fetched.
	URL string
	// Status is the HTTP status code.
	Status int
	// RetryAfter is the parsed Retry-After header, 0 when absent.
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("activitypub: fetch %s: status %d", e.URL, e.Status)
}

// FetcherConfig configures a Fetcher.
type FetcherConfig struct {
	// Client makes the requests. Default NewClient(ClientOptions{}), which
	// refuses private addresses; it must not follow redirects itself.
	Client *http.Client
	// Signer signs every GET (GoToSocial and authorized-fetch Mastodon
	// require it). Required: courier signs fetches as its instance actor.
	Signer Signer
	// MaxBody bounds a response body. Default 1 MiB.
	MaxBody int64
	// MaxRedirects bounds the redirects followed (each re-signed for its
	// URL). Default 3.
	MaxRedirects int
	// Now is the clock used for the Date header. Default time.Now.
	Now func() time.Time
	// Logger receives debug records of fetches. Default: discard.
	Logger *slog.Logger
}

func (c FetcherConfig) withDefaults() FetcherConfig {
	if c.Client == nil {
		c.Client = NewClient(ClientOptions{})
	}
	if c.MaxBody <= 0 {
		c.MaxBody = 1 << 20
	}
	if c.MaxRedirects <= 0 {
		c.MaxRedirects = 3
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c FetcherConfig) validate() error {
	if c.Signer.KeyID == "" || c.Signer.Key == nil {
		return errors.New("activitypub: fetcher: Signer.KeyID and Signer.Key are required")
	}
	return nil
}

// Fetcher fetches remote ActivityPub documents with signed GETs. It is
// stateless (callers cache; see Resolver) and safe for concurrent use.
type Fetcher struct {
	cfg FetcherConfig
}

// NewFetcher returns a Fetcher.
func NewFetcher(cfg FetcherConfig) (*Fetcher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Fetcher{cfg: cfg}, nil
}

// Fetch GETs rawURL (signed, with the ActivityPub Accept header), following
// up to MaxRedirects redirects, and returns the body and the final URL. It
// maps 410 to ErrGone, 404 to ErrNotFound and other non-2xx statuses to
// *StatusError, and refuses non-ActivityPub content types and bodies over
// MaxBody. It does not check the document's id.
func (f *Fetcher) Fetch(ctx context.Context, rawURL string) (body []byte, finalURL string, err error) {
	cur := rawURL
	for hop := 0; ; hop++ {
		u, err := parseHTTPURL(cur)
		if err != nil {
			return nil, "", err
		}
		u.Fragment, u.RawFragment = "", ""
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, "", fmt.Errorf("activitypub: fetch %s: %w", cur, err)
		}
		req.Header.Set("Accept", AcceptHeader)
		if err := f.cfg.Signer.Sign(req, nil, f.cfg.Now()); err != nil {
			return nil, "", err
		}
		hook := fetchHookOf(ctx)
		if hook.Before != nil {
			if err := hook.Before(u.Host); err != nil {
				return nil, "", fmt.Errorf("activitypub: fetch %s: %w: %w", cur, ErrFetchRefused, err)
			}
		}
		resp, err := f.cfg.Client.Do(req)
		if err != nil {
			return nil, "", fmt.Errorf("activitypub: fetch %s: %w", cur, err)
		}
		loc := resp.Header.Get("Location")
		status := resp.StatusCode
		if status >= 300 && status < 400 && loc != "" {
			drain(resp.Body)
			if hop >= f.cfg.MaxRedirects {
				return nil, "", fmt.Errorf("activitypub: fetch %s: too many redirects", rawURL)
			}
			next, err := u.Parse(loc)
			if err != nil {
				return nil, "", fmt.Errorf("%w: redirect to %q", ErrBadURL, loc)
			}
			f.cfg.Logger.DebugContext(ctx, "activitypub fetch redirected", "url", RedactURL(cur), "location", RedactURL(next.String()), "status", status)
			cur = next.String()
			continue
		}
		body, err := f.read(resp, cur)
		if hook.After != nil {
			switch {
			case err == nil:
				hook.After(u.Host, len(body))
			case errors.Is(err, ErrTooLarge):
				hook.After(u.Host, int(f.cfg.MaxBody))
			}
		}
		if err != nil {
			return nil, "", err
		}
		return body, cur, nil
	}
}

// read consumes resp (closing it), mapping its status and checking type and size.
func (f *Fetcher) read(resp *http.Response, u string) ([]byte, error) {
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusGone:
		drain(resp.Body)
		return nil, fmt.Errorf("activitypub: fetch %s: %w", u, ErrGone)
	case resp.StatusCode == http.StatusNotFound:
		drain(resp.Body)
		return nil, fmt.Errorf("activitypub: fetch %s: %w", u, ErrNotFound)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		drain(resp.Body)
		return nil, &StatusError{URL: u, Status: resp.StatusCode, RetryAfter: RetryAfter(resp.Header.Get("Retry-After"), f.cfg.Now(), math.MaxInt64)}
	}
	if ct := resp.Header.Get("Content-Type"); !isFetchableContentType(ct) {
		drain(resp.Body)
		return nil, fmt.Errorf("activitypub: fetch %s: %w: %q", u, ErrContentType, ct)
	}
	if resp.ContentLength > f.cfg.MaxBody {
		return nil, fmt.Errorf("activitypub: fetch %s: %w: %d bytes", u, ErrTooLarge, resp.ContentLength)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.cfg.MaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("activitypub: fetch %s: read body: %w", u, err)
	}
	if int64(len(body)) > f.cfg.MaxBody {
		return nil, fmt.Errorf("activitypub: fetch %s: %w: over %d bytes", u, ErrTooLarge, f.cfg.MaxBody)
	}
	return body, nil
}

// isFetchableContentType accepts ActivityPub content types, and also
// application/ld+json without a profile, which some servers send.
func isFetchableContentType(ct string) bool {
	if IsActivityPubContentType(ct) {
		return true
	}
	mt, params, ok := parseMediaType(ct)
	return ok && mt == "application/ld+json" && params["profile"] == ""
}

// FetchActor fetches and parses the actor at actorURL. The document's id
// must equal actorURL (without fragment), or the URL it was finally served
// from after redirects on the same host; otherwise ErrIDMismatch.
func (f *Fetcher) FetchActor(ctx context.Context, actorURL string) (*Actor, error) {
	body, final, err := f.Fetch(ctx, actorURL)
	if err != nil {
		return nil, err
	}
	a, err := ParseActor(body)
	if err != nil {
		return nil, fmt.Errorf("activitypub: fetch actor %s: %w", actorURL, err)
	}
	if !idMatches(a.ID, actorURL, final) {
		return nil, fmt.Errorf("activitypub: fetch actor %s: %w: id %s", actorURL, ErrIDMismatch, a.ID)
	}
	return a, nil
}

// FetchObject fetches and parses the object at id (a Note, a Page, an
// activity...). The document's id must equal id (or the URL it was finally
// served from after redirects on the same host); otherwise ErrIDMismatch.
func (f *Fetcher) FetchObject(ctx context.Context, id string) (*Object, error) {
	body, final, err := f.Fetch(ctx, id)
	if err != nil {
		return nil, err
	}
	o, err := ParseObject(body)
	if err != nil {
		return nil, fmt.Errorf("activitypub: fetch object %s: %w", id, err)
	}
	if !idMatches(o.ID, id, final) {
		return nil, fmt.Errorf("activitypub: fetch object %s: %w: id %s", id, ErrIDMismatch, o.ID)
	}
	return o, nil
}

// FetchKey resolves a signature's keyId to a public key and the actor that
// owns it, from whatever the keyId URL serves: the owner's actor document
// ({actor}#main-key, Mastodon), a minimal actor without an inbox
// (GoToSocial's {actor}/main-key), a standalone key document, an actor
// whose publicKey is a list, or a FEP-521a Multikey (alone or in an
// actor's assertionMethod). Unless the document served is the owner's whole
// actor, the owner the key names is then fetched from its own id and must
// list the key itself (its copy is the one used), so the key's owner always
// points back to the key and the returned actor is always a full document
// fetched from its id (callers may cache it).
func (f *Fetcher) FetchKey(ctx context.Context, keyID string) (crypto.PublicKey, *Actor, error) {
	body, final, err := f.Fetch(ctx, keyID)
	if err != nil {
		return nil, nil, err
	}
	if a, err := ParseActor(body); err == nil && idMatches(a.ID, keyID, final) {
		return KeyOf(a, keyID)
	}
	h, err := parseKeyHolder(body)
	if err != nil {
		return nil, nil, fmt.Errorf("activitypub: fetch key %s: %w", keyID, err)
	}
	k, ok := h.key(keyID)
	if !ok {
		return nil, nil, fmt.Errorf("activitypub: fetch key %s: %w: the document %s does not carry it", keyID, ErrKeyNotFound, h.id)
	}
	// The document is the key itself, or holds it: either way its id is the
	// key's URL or, for a minimal actor, names the owner.
	if !idMatches(h.id, keyID, final) && !(h.id == k.Owner && sameHost(h.id, keyID)) {
		return nil, nil, fmt.Errorf("activitypub: fetch key %s: %w: id %s", keyID, ErrIDMismatch, h.id)
	}
	if k.Owner == "" || sameID(k.Owner, keyID) {
		return nil, nil, fmt.Errorf("activitypub: fetch key %s: %w: no owner", keyID, ErrKeyNotFound)
	}
	owner, err := f.FetchActor(ctx, k.Owner)
	if err != nil {
		return nil, nil, err
	}
	return KeyOf(owner, keyID)
}

// sameHost reports whether two URLs have the same scheme and host.
func sameHost(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && ua.Host != "" &&
		strings.EqualFold(ua.Host, ub.Host) && ua.Scheme == ub.Scheme
}

// KeyOf returns the public key keyID of actor a, parsed from its PEM or
// Multikey (PublicKey.Parse), and a as the key's owner. The key must be one
// of a's keys (see Actor.Key) and, when it names an owner, be owned by a;
// otherwise the error matches ErrKeyNotFound. Key material that cannot be
// parsed gives an error matching ErrBadKey.
func KeyOf(a *Actor, keyID string) (crypto.PublicKey, *Actor, error) {
	k, ok := a.Key(keyID)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s not in actor %s", ErrKeyNotFound, keyID, a.ID)
	}
	if k.Owner != "" && k.Owner != a.ID {
		return nil, nil, fmt.Errorf("%w: key %s owned by %s, not %s", ErrKeyNotFound, keyID, k.Owner, a.ID)
	}
	pub, err := k.Parse()
	if err != nil {
		return nil, nil, fmt.Errorf("activitypub: key %s: %w", keyID, err)
	}
	return pub, a, nil
}

// idMatches reports whether a document fetched for requested, and finally
// served from final, carries an acceptable id: the requested URL, or the
// final URL when a redirect stayed on the requested host.
func idMatches(id, requested, final string) bool {
	return sameID(id, requested) || (sameID(id, final) && sameHost(final, requested))
}

// sameID reports whether id names u, ignoring u's fragment.
func sameID(id, u string) bool {
	if id == "" {
		return false
	}
	if i := strings.IndexByte(u, '#'); i >= 0 {
		u = u[:i]
	}
	return id == u
}

// parseHTTPURL parses an absolute http or https URL with a host.
func parseHTTPURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %q", ErrBadURL, s)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%w: %q", ErrBadURL, s)
	}
	return u, nil
}

// RetryAfter parses a Retry-After value (delay-seconds or an HTTP date)
// against now and clamps it to [0, limit]; an absent or unreadable value
// is 0.
func RetryAfter(v string, now time.Time, limit time.Duration) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		if n > int64(limit/time.Second) {
			return limit
		}
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), limit)
}

// drain reads a little of an unused body so the connection can be reused.
func drain(r io.Reader) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r, 4<<10))
}
