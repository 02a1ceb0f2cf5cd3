package activitypub

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"https://mastodon.example/users/alice/inbox", "https://mastodon.example/users/alice/inbox"},
		{"https://mastodon.example/inbox", "https://mastodon.example/inbox"},
		{"https://hooks.example/services/T0AB12CD/B0EF34GH/Xq9mZ2kL7pR4sT1vW8yN3bC6", "https://hooks.example/services/T0AB12CD/B0EF34GH/redacted"},
		{"https://discord.example/api/webhooks/123456789012345678/abcdefghijklmnopqrstuvwxyzABCDEFGHIJ", "https://discord.example/api/webhooks/123456789012345678/redacted"},
		{"https://app.example/hook?token=s3cr3t&kind=x", "https://app.example/hook?kind=redacted&token=redacted"},
		{"https://user:pa55word@app.example/hook", "https://redacted@app.example/hook"},
		{"http://127.0.0.1:8080/hooks#frag", "http://127.0.0.1:8080/hooks"},
		{"::not a url", "redacted"},
	} {
		if got := RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestRedactError: the HTTP client's error for a URL with a credential
// names the URL redacted, and still matches what it wraps.
func TestRedactError(t *testing.T) {
	t.Parallel()
	// The guard refuses loopback: an error of the client, before any
	// packet.
	addr := "127.0.0.1:9"
	c := NewClient(ClientOptions{Timeout: 5 * time.Second})
	_, err := c.Post("http://"+addr+"/hooks/Xq9mZ2kL7pR4sT1vW8yN3bC6?token=s3cr3t", "application/json", strings.NewReader("{}"))
	if err == nil {
		t.Fatal("POST to a closed port succeeded")
	}
	red := RedactError(err)
	if msg := red.Error(); strings.Contains(msg, "s3cr3t") || strings.Contains(msg, "Xq9mZ2kL7pR4sT1vW8yN3bC6") || !strings.Contains(msg, addr) {
		t.Fatalf("redacted error %q", msg)
	}
	var op *net.OpError
	if !errors.As(red, &op) || !errors.Is(red, ErrPrivateAddress) {
		t.Fatalf("the redacted error lost what it wraps: %v", red)
	}
}
