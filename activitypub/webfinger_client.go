package activitypub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// maxJRD bounds a WebFinger answer.
const maxJRD = 64 << 10

// WebFinger resolves user@host to the actor id of the JRD's self link: a
// GET of {scheme}://host/.well-known/webfinger?resource=acct:user@host
// through client (which enforces the private-address policy; it must not
// follow redirects itself, and none is followed here). scheme is "https"
// ("http" only for tests against loopback peers). A 404 or 410 wraps
// ErrNotFound, another non-2xx answer is a *StatusError, and an answer
// without a self link wraps ErrNotFound.
func WebFinger(ctx context.Context, client *http.Client, scheme, user, host string) (string, error) {
	if scheme != "https" && scheme != "http" {
		return "", fmt.Errorf("%w: scheme %q", ErrBadURL, scheme)
	}
	u := url.URL{Scheme: scheme, Host: host, Path: "/.well-known/webfinger",
		RawQuery: url.Values{"resource": {"acct:" + user + "@" + host}}.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", fmt.Errorf("activitypub: webfinger %s@%s: %w", user, host, err)
	}
	req.Header.Set("Accept", JRDContentType+", application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("activitypub: webfinger %s@%s: %w", user, host, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		drain(resp.Body)
		return "", fmt.Errorf("activitypub: webfinger %s@%s: %w", user, host, ErrNotFound)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		drain(resp.Body)
		return "", &StatusError{URL: u.String(), Status: resp.StatusCode}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJRD+1))
	if err != nil {
		return "", fmt.Errorf("activitypub: webfinger %s@%s: %w", user, host, err)
	}
	if len(body) > maxJRD {
		return "", fmt.Errorf("activitypub: webfinger %s@%s: %w", user, host, ErrTooLarge)
	}
	var j JRD
	if err := json.Unmarshal(body, &j); err != nil {
		return "", fmt.Errorf("activitypub: webfinger %s@%s: %w", user, host, err)
	}
	self := j.Self()
	if self == "" {
		return "", fmt.Errorf("activitypub: webfinger %s@%s: no self link: %w", user, host, ErrNotFound)
	}
	if _, err := parseHTTPURL(self); err != nil {
		return "", err
	}
	return self, nil
}
