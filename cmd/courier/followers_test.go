package main

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/courier-ap/courier/store"
)

// runCLI runs courier with args and no environment; it returns the exit
// status, stdout and stderr.
func runCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr, func(string) string { return "" })
	return code, stdout.String(), stderr.String()
}

// TestLockedActorFollowRequests: a signed Follow over HTTP to an actor
// that manually approves followers stays pending (no Accept is sent);
// `courier actor followers --pending` lists it, `approve` accepts it and
// the Accept reaches the follower, signed; `reject` then ends the follow
// and the Reject reaches it too.
func TestLockedActorFollowRequests(t *testing.T) {
	t.Parallel()
	remote := newScriptedInbox(t)
	remote.status.Store(http.StatusAccepted)
	a, _ := startApp(t, func(c *Config) { c.AllowPrivateAddresses = true })
	ctx := context.Background()
	alice, _, err := a.store.CreateActor(ctx, store.NewActor{Name: "alice", ManuallyApprovesFollowers: true})
	if err != nil {
		t.Fatal(err)
	}
	remote.verifyWith(t, alice)
	followID := remote.srv.URL + "/follows/1"
	if st := remote.follow(t, a.cfg.BaseURL+"/users/alice/inbox", followID, alice.URI); st != http.StatusAccepted {
		t.Fatalf("Follow: %d", st)
	}
	waitFor(t, "the pending follow request", func() bool {
		_, n, err := a.store.Followers(ctx, alice.ID, store.StatePending, 0, 10)
		return err == nil && n == 1
	})
	db := []string{"--db", a.cfg.DB, "--base-url", a.cfg.BaseURL}
	code, out, errOut := runCLI(append(append([]string{"actor", "followers"}, db...), "alice", "--pending")...)
	if code != 0 || !strings.HasPrefix(out, remote.actor()+"\t"+followID+"\t") || strings.Count(out, "\n") != 1 {
		t.Fatalf("followers --pending: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, _ := runCLI(append(append([]string{"actor", "followers"}, db...), "alice")...); code != 0 || out != "" {
		t.Fatalf("accepted followers before approval: exit %d, %q", code, out)
	}
	if slices.Contains(remote.received(), "Accept") {
		t.Fatal("an Accept was sent for a locked actor's Follow")
	}

	code, out, errOut = runCLI(append(append([]string{"actor", "followers", "approve"}, db...), "alice", remote.actor())...)
	if code != 0 || !strings.Contains(out, "Accept") {
		t.Fatalf("approve: exit %d, %q, %q", code, out, errOut)
	}
	waitFor(t, "the Accept delivered", func() bool { return slices.Contains(remote.received(), "Accept") })
	if code, out, _ := runCLI(append(append([]string{"actor", "followers"}, db...), "alice")...); code != 0 ||
		!strings.HasPrefix(out, remote.actor()+"\t") {
		t.Fatalf("accepted followers after approval: exit %d, %q", code, out)
	}
	if code, _, errOut := runCLI(append(append([]string{"actor", "followers", "approve"}, db...), "alice", remote.actor())...); code != 1 ||
		strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "already an accepted follower") {
		t.Fatalf("approve twice: exit %d, %q", code, errOut)
	}

	code, out, errOut = runCLI(append(append([]string{"actor", "followers", "reject"}, db...), "alice", remote.actor())...)
	if code != 0 || !strings.Contains(out, "Reject") {
		t.Fatalf("reject: exit %d, %q, %q", code, out, errOut)
	}
	waitFor(t, "the Reject delivered", func() bool { return slices.Contains(remote.received(), "Reject") })
	if ok, err := a.store.IsFollower(ctx, alice.ID, remote.actor()); ok || err != nil {
		t.Fatalf("a rejected follower follows (%v)", err)
	}
	if got := remote.received(); slices.Contains(got, "bad-signature") {
		t.Fatalf("received %v: want every POST signed with alice's key", got)
	}
}

// TestFollowersUsage: bad invocations exit 2 with one line; an unknown
// actor or follower exits 1 with one line.
func TestFollowersUsage(t *testing.T) {
	t.Parallel()
	a, _ := startApp(t, func(c *Config) {})
	if _, _, err := a.store.CreateActor(context.Background(), store.NewActor{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	db := []string{"--db", a.cfg.DB, "--base-url", a.cfg.BaseURL}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"actor", "followers"}, 2, "courier actor followers NAME"},
		{append([]string{"actor", "followers"}, db...), 2, "courier actor followers NAME"},
		{append(append([]string{"actor", "followers", "approve"}, db...), "alice"), 2, "courier actor followers NAME"},
		{append(append([]string{"actor", "followers"}, db...), "alice", "--colour"), 2, `unknown flag "--colour"`},
		{append(append([]string{"actor", "followers", "reject"}, db...), "alice", "https://x.test/u", "--pending"), 2, "courier actor followers NAME"},
		{append(append([]string{"actor", "followers"}, db...), "nobody"), 1, `no actor "nobody"`},
		{append(append([]string{"actor", "followers", "approve"}, db...), "alice", "https://x.test/u"), 1, "no pending follow request"},
	} {
		code, out, errOut := runCLI(c.args...)
		if code != c.code || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, code, out, errOut, c.code, c.want)
		}
	}
}
