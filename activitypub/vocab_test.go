package activitypub

import "testing"

func TestIsActivityPubContentType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ct   string
		want bool
	}{
		{"application/activity+json", true},
		{"application/activity+json; charset=utf-8", true},
		{"Application/Activity+JSON", true},
		{`application/ld+json; profile="https://www.w3.org/ns/activitystreams"`, true},
		{`application/ld+json;profile="https://www.w3.org/ns/activitystreams"`, true},
		{`application/ld+json ; profile=https://www.w3.org/ns/activitystreams`, true},
		{`APPLICATION/LD+JSON; PROFILE="https://www.w3.org/ns/activitystreams"; charset=utf-8`, true},
		{`application/ld+json; profile="https://www.w3.org/ns/activitystreams#"`, true},
		{`application/ld+json; profile="http://www.w3.org/ns/json-ld#compacted https://www.w3.org/ns/activitystreams"`, true},
		{"application/ld+json", false},
		{`application/ld+json; profile="https://example.com/other"`, false},
		{"application/json", false},
		{"text/html", false},
		{"", false},
		{"application/activity+json; =broken", false},
	}
	for _, tt := range tests {
		if got := IsActivityPubContentType(tt.ct); got != tt.want {
			t.Errorf("IsActivityPubContentType(%q) = %v, want %v", tt.ct, got, tt.want)
		}
	}
}

func TestAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		accept string
		want   bool
	}{
		{"application/activity+json", true},
		{AcceptHeader, true},
		{`application/ld+json; profile="https://www.w3.org/ns/activitystreams"`, true},
		{"application/ld+json", true},
		{`text/html, application/activity+json;q=0.9`, true},
		{`application/activity+json;q=0`, false},
		{`application/ld+json; profile="https://example.com/x"`, false},
		{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", false},
		{"*/*", false},
		{"application/json", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := Accepts(tt.accept); got != tt.want {
			t.Errorf("Accepts(%q) = %v, want %v", tt.accept, got, tt.want)
		}
	}
}

func TestIsPublic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		v    string
		want bool
	}{
		{Public, true},
		{"as:Public", true},
		{"Public", true},
		{"", false},
		{"public", false},
		{"as:public", false},
		{"https://www.w3.org/ns/activitystreams#public", false},
		{"http://www.w3.org/ns/activitystreams#Public", false},
		{Public + "/", false},
		{"https://courier.example/users/alice/followers", false},
	}
	for _, tt := range tests {
		if got := IsPublic(tt.v); got != tt.want {
			t.Errorf("IsPublic(%q) = %v, want %v", tt.v, got, tt.want)
		}
	}
}
