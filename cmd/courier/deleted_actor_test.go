package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// wantGone asserts over a's real HTTP listener that the deleted actor
// name answers 410 Gone with its Tombstone, and WebFinger 410 for it.
func wantGone(t *testing.T, a *app, name string) {
	t.Helper()
	get := func(path string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, a.cfg.BaseURL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "application/activity+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	status, body := get("/users/" + name)
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); status != http.StatusGone || err != nil ||
		doc["id"] != a.cfg.BaseURL+"/users/"+name || doc["type"] != "Tombstone" || doc["formerType"] != "Person" || doc["deleted"] == nil {
		t.Fatalf("deleted actor %s: %d %s", name, status, body)
	}
	host := strings.TrimPrefix(a.cfg.BaseURL, "http://")
	if status, body := get("/.well-known/webfinger?resource=" + url.QueryEscape("acct:"+name+"@"+host)); status != http.StatusGone {
		t.Fatalf("WebFinger of deleted actor %s: %d %s", name, status, body)
	}
}

// wantNameRefused asserts that `courier actor create NAME` on a's
// database refuses the name of a deleted actor: exit 1, one line.
func wantNameRefused(t *testing.T, a *app, name string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"actor", "create", "--db", a.cfg.DB, name}, &stdout, &stderr, func(string) string { return "" })
	if code != 1 || stdout.Len() != 0 || strings.Count(stderr.String(), "\n") != 1 ||
		!strings.Contains(stderr.String(), "belonged to a deleted actor") {
		t.Fatalf("actor create %s: exit %d, stdout %q, stderr %q", name, code, stdout.String(), stderr.String())
	}
}
