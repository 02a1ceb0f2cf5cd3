package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestCreateActorCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var out, errOut bytes.Buffer
	code := CreateActorCommand(b.ctx, b.st, []string{"carol", "--display-name", "Carol C.", "--summary", "hello"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || lines[0] != "id: "+b.base+"/users/carol" || !strings.HasPrefix(lines[1], "token: ") {
		t.Fatalf("output %q", out.String())
	}
	token := strings.TrimPrefix(lines[1], "token: ")
	// The printed token writes to the outbox.
	r := b.post(t, "carol", token, map[string]any{"type": "Note", "content": "hi", "to": "as:Public"})
	wantStatus(t, r, http.StatusCreated)
	if doc := b.get(t, "/users/carol").json(t); doc["name"] != "Carol C." || doc["summary"] != "hello" {
		t.Fatalf("actor %v", doc)
	}

	out.Reset()
	errOut.Reset()
	if code := CreateActorCommand(b.ctx, b.st, []string{"--json", "--manually-approves-followers", "dave"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var v struct{ ID, Token string }
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil || v.ID != b.base+"/users/dave" || len(v.Token) < 40 || dec.More() {
		t.Fatalf("json output %+v, %v", v, err)
	}
	if doc := b.get(t, "/users/dave").json(t); doc["manuallyApprovesFollowers"] != true {
		t.Fatalf("actor %v", doc)
	}

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"carol"}, 1, "taken"},
		{[]string{"Bad-Name"}, 2, "invalid"},
		{[]string{strings.Repeat("x", 31)}, 2, "invalid"},
		{nil, 2, "usage"},
		{[]string{"a", "b"}, 2, "usage"},
		{[]string{"eve", "--bogus"}, 2, "bogus"},
	} {
		out.Reset()
		errOut.Reset()
		if code := CreateActorCommand(b.ctx, b.st, tc.args, &out, &errOut); code != tc.code || !strings.Contains(errOut.String(), tc.msg) || out.Len() != 0 {
			t.Errorf("%q: exit %d (want %d), stderr %q, stdout %q", tc.args, code, tc.code, errOut.String(), out.String())
		}
	}
}
