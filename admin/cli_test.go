package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/courier-ap/courier/internal/testnet"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/admin"
	"github.com/courier-ap/courier/outbox"
)

// lines returns the non-empty lines of s.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// columns splits a table line on runs of spaces.
func columns(l string) []string { return strings.Fields(l) }

func TestCLIEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := outbox.NewRegistry()
	reg.Handle("bad", "h", func(context.Context, outbox.Event) error {
		return outbox.Permanent(errors.New("remote said\tno\nreally"))
	})
	b.startWorker(reg, 3)
	dead := b.enqueue(events(3, "bad", "x.example")...)
	for _, e := range dead {
		b.waitStatus(e.ID, outbox.StatusDeadLettered)
	}
	later := events(2, "later", "y.example")
	for i := range later {
		later[i].NotBefore = time.Now().Add(48 * time.Hour) // stays pending under the running worker
	}
	pending := b.enqueue(later...)

	code, out, errOut := b.cli("events", "--status", "dead_lettered")
	ls := lines(out)
	if code != 0 || errOut != "" || len(ls) != 4 {
		t.Fatalf("events: %d %q\n%s", code, errOut, out)
	}
	if h := columns(ls[0]); h[0] != "ROW" || h[1] != "EVENT" || h[len(h)-2] != "LAST" {
		t.Errorf("header %q", ls[0])
	}
	for i, e := range dead {
		c := columns(ls[i+1])
		if c[0] != strconv.FormatInt(b.row(e.ID).ID, 10) || c[1] != e.ID || c[2] != "bad" || c[3] != "x.example" ||
			c[4] != "dead_lettered" || c[5] != "1" || !strings.Contains(ls[i+1], "remote said no really") {
			t.Errorf("row %d: %q", i, ls[i+1])
		}
	}
	// The same list as JSON, and paging hints that carry the filters.
	code, out, _ = b.cli("--json", "events", "--status", "dead_lettered", "--limit", "2")
	var l admin.EventList
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || len(l.Events) != 2 || l.NextCursor == "" {
		t.Fatalf("events --json: %d %s", code, out)
	}
	code, out, _ = b.cli("events", "--status", "dead_lettered", "--limit", "2")
	if code != 0 || !strings.Contains(out, "more: courier admin events --limit 2 --status dead_lettered --cursor "+l.NextCursor) {
		t.Errorf("paging hint missing:\n%s", out)
	}
	code, out, _ = b.cli("events", "--type", "nothing")
	if code != 0 || strings.TrimSpace(out) != "no events match" {
		t.Errorf("empty list: %d %q", code, out)
	}

	code, out, _ = b.cli("events", "show", dead[0].ID)
	if code != 0 || !strings.Contains(out, "event id") || !strings.Contains(out, dead[0].ID) ||
		!strings.Contains(out, "payload:") || !strings.Contains(out, `"n": 0`) || !strings.Contains(out, "ledger:") ||
		!strings.Contains(out, "last error:") {
		t.Errorf("events show:\n%s", out)
	}
	code, out, _ = b.cli("events", "show", "--json", dead[0].ID)
	var d admin.EventDetail
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || d.Event.EventID != dead[0].ID {
		t.Errorf("events show --json: %d %s", code, out)
	}

	code, out, _ = b.cli("events", "retry", "--all", "--type", "bad", "--dry-run")
	if code != 0 || strings.TrimSpace(out) != "3 dead-lettered events match; nothing retried (dry run)" {
		t.Errorf("retry dry run: %d %q", code, out)
	}
	code, out, _ = b.cli("events", "retry", dead[0].ID)
	if code != 0 || !strings.HasPrefix(out, "retry event "+dead[0].ID) {
		t.Errorf("retry: %d %q", code, out)
	}
	b.waitStatus(dead[0].ID, outbox.StatusDeadLettered) // the handler still fails
	code, out, _ = b.cli("events", "retry", "--all", "--host", "x.example")
	if code != 0 || !strings.HasPrefix(out, "retried 3 dead-lettered events") {
		t.Errorf("retry --all: %d %q", code, out)
	}
	code, out, _ = b.cli("events", "discard", pending[0].ID)
	if code != 0 || !strings.HasPrefix(out, "discard event "+pending[0].ID) {
		t.Errorf("discard: %d %q", code, out)
	}
	code, out, errOut = b.cli("events", "discard", pending[0].ID)
	if code != 1 || out != "" || errOut != "courier admin: no event "+pending[0].ID+" in the outbox (HTTP 404)\n" {
		t.Errorf("discard again: %d %q %q", code, out, errOut)
	}
	code, out, _ = b.cli("stats")
	if code != 0 || !strings.Contains(out, "STATUS") || !strings.Contains(out, "later") || !strings.Contains(out, "totals: pending") {
		t.Errorf("stats:\n%s", out)
	}
}

func TestCLIDomainBlocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, out, _ := b.cli("blocks")
	if code != 0 || strings.TrimSpace(out) != "no blocked domains" {
		t.Errorf("empty blocks: %d %q", code, out)
	}
	code, out, _ = b.cli("blocks", "add", "Spam.Example", "--reason", "spam waves")
	if code != 0 || strings.TrimSpace(out) != "blocked spam.example" {
		t.Errorf("add: %d %q", code, out)
	}
	code, out, _ = b.cli("blocks")
	ls := lines(out)
	if code != 0 || len(ls) != 2 || columns(ls[0])[0] != "DOMAIN" || columns(ls[1])[0] != "spam.example" ||
		!strings.HasSuffix(ls[1], "spam waves") {
		t.Errorf("blocks:\n%s", out)
	}
	code, out, _ = b.cli("blocks", "--json")
	var l admin.DomainBlockList
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || len(l.DomainBlocks) != 1 || l.DomainBlocks[0].Reason != "spam waves" {
		t.Errorf("blocks --json: %d %s", code, out)
	}
	code, out, _ = b.cli("blocks", "remove", "spam.example")
	if code != 0 || !strings.HasPrefix(out, "unblock spam.example") {
		t.Errorf("remove: %d %q", code, out)
	}
	code, _, errOut := b.cli("blocks", "remove", "spam.example")
	if code != 1 || errOut != "courier admin: domain spam.example is not blocked (HTTP 404)\n" {
		t.Errorf("remove again: %d %q", code, errOut)
	}
	code, _, errOut = b.cli("blocks", "add", "not a domain")
	if code != 1 || !strings.Contains(errOut, "HTTP 400") {
		t.Errorf("bad domain: %d %q", code, errOut)
	}
}

func TestCLIUsageAndErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, args := range [][]string{
		{},
		{"nonsense"},
		{"events", "show"},
		{"events", "show", "a", "b"},
		{"events", "--bogus"},
		{"events", "retry"},
		{"events", "retry", "--type", "x"},
		{"events", "retry", "--all", "some-id"},
		{"hosts", "drain"},
		{"exhausted", "replay"},
		{"exhausted", "replay", "1", "--event", "e"},
		{"blocks", "frobnicate", "x"},
		{"stats", "extra"},
		{"--limit", "3", "events"},
	} {
		code, out, errOut := b.cli(args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "courier admin: ") || len(lines(errOut)) != 2 {
			t.Errorf("%q: %d %q %q, want a usage error", args, code, out, errOut)
		}
	}
	code, out, _ := b.cli("--help")
	if code != 0 || !strings.Contains(out, "usage: courier admin") {
		t.Errorf("--help: %d %q", code, out)
	}

	run := func(env map[string]string, args ...string) (int, string, string) {
		var o, e bytes.Buffer
		code := admin.Command(b.ctx, args, &o, &e, func(k string) string { return env[k] })
		return code, o.String(), e.String()
	}
	code, _, errOut := run(map[string]string{"COURIER_ADMIN_URL": b.srv.URL}, "events")
	if code != 2 || !strings.Contains(errOut, "no admin token") {
		t.Errorf("no token: %d %q", code, errOut)
	}
	code, _, errOut = run(map[string]string{"COURIER_ADMIN_URL": b.srv.URL, "COURIER_ADMIN_TOKEN": "wrong"}, "events")
	if code != 1 || errOut != "courier admin: missing or wrong admin bearer token (HTTP 401)\n" {
		t.Errorf("wrong token: %d %q", code, errOut)
	}
	// Flags override the environment.
	code, _, errOut = run(map[string]string{"COURIER_ADMIN_URL": "http://127.0.0.1:1", "COURIER_ADMIN_TOKEN": "wrong"},
		"--server", b.srv.URL, "events", "--admin-token", token)
	if code != 0 {
		t.Errorf("flags over env: %d %q", code, errOut)
	}
	code, _, errOut = run(map[string]string{"COURIER_ADMIN_TOKEN": token}, "--server", "ftp://x", "events")
	if code != 2 || !strings.Contains(errOut, "want an http or https URL") {
		t.Errorf("bad server: %d %q", code, errOut)
	}
	// A server that is not there: one line, exit 1.
	addr := testnet.Refusing(t)
	code, _, errOut = run(map[string]string{"COURIER_ADMIN_TOKEN": token}, "--server", "http://"+addr, "stats")
	if code != 1 || !strings.Contains(errOut, "connection refused") || len(lines(errOut)) != 1 {
		t.Errorf("no server: %d %q", code, errOut)
	}
	// A disabled API says so.
	off := setup(t, func(_ *bundle, c *admin.Config) { c.Token = "" })
	code, _, errOut = off.cli("hosts")
	if code != 1 || !strings.Contains(errOut, "admin API is disabled") || !strings.Contains(errOut, "HTTP 404") {
		t.Errorf("disabled: %d %q", code, errOut)
	}
	// Components this server does not run.
	code, _, errOut = b.cli("exhausted")
	if code != 1 || !strings.Contains(errOut, "JetStream is not in use") || !strings.Contains(errOut, "HTTP 409") {
		t.Errorf("exhausted on db bus: %d %q", code, errOut)
	}
}
