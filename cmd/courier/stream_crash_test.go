package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// TestStreamLosesNothingAcrossCrash: 1,000 signed activities arrive over
// real HTTP for alice while her application follows her inbox's event
// stream, disconnecting at random points and reconnecting with
// Last-Event-ID, and courier is SIGKILLed once mid-run and started again.
// The union of the events received is exactly the 1,000 activities, none
// twice, their ids 1 to 1,000 in order.
func TestStreamLosesNothingAcrossCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts courier processes and sends 1,000 signed activities")
	}
	const total = 1000
	loc := storetest.Location(t)
	key, err := activitypub.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	remote := newRemoteHost(t, key, http.StatusAccepted)
	lnAddr, addr := heldAddr(t)
	lnOps, ops := heldAddr(t)
	base := "http://" + addr // the instance's URL; after the restart connections go elsewhere, Host stays
	code, out, errb := runCommand("actor", "create", "--db", loc, "--base-url", base, "--json", "alice")
	if code != 0 {
		t.Fatalf("actor create: exit %d, stderr %q", code, errb)
	}
	var alice struct{ ID, Token string }
	if err := json.Unmarshal([]byte(out), &alice); err != nil {
		t.Fatalf("actor create printed %q: %v", out, err)
	}
	args := func(listen, ops string) []string {
		return []string{"serve", "--listen", listen, "--ops-listen", ops, "--db", loc, "--bus", "db", "--base-url", base,
			"--allow-private-addresses", "--synchronous", "FULL", "--postgres-conns", "8", "--log-level", "warn",
			"--inbox-host-requests", "1000000", "--inbox-host-bytes", "1000000000", "--stream-keep-alive", "1s",
			// What the killed process had claimed is taken again after these.
			"--lease", "3s", "--ledger-lease", "3s"}
	}
	p := startProcessOn(t, "courier", []net.Listener{lnAddr, lnOps}, args(addr, ops)...)
	p.waitReady(t, ops)
	var current atomic.Value // the address courier listens at now
	current.Store(addr)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline := time.Now().Add(5 * time.Minute)
	if dl, ok := t.Deadline(); ok {
		deadline = dl.Add(-30 * time.Second)
	}

	// The sender: each activity until it is answered 202 (a redelivery of
	// one whose answer the crash lost is recognised by its id).
	ids := make([]string, total)
	var accepted atomic.Int64
	sendDone := make(chan error, 1)
	go func() {
		for i := range total {
			ids[i] = fmt.Sprintf("%s/activities/dm/%d", remote.srv.URL, i)
			act := map[string]any{
				"@context": activitypub.ActivityStreams, "id": ids[i], "type": "Create", "actor": remote.actorID(),
				"to": []string{alice.ID},
				"object": map[string]any{"id": fmt.Sprintf("%s/notes/%d", remote.srv.URL, i), "type": "Note",
					"attributedTo": remote.actorID(), "content": fmt.Sprintf("message %d", i), "to": []string{alice.ID}},
			}
			for {
				st := postVia(remote, current.Load().(string), base+"/inbox", act)
				if st == http.StatusAccepted {
					break
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					sendDone <- fmt.Errorf("activity %d: last answer %d", i, st)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			accepted.Add(1)
		}
		sendDone <- nil
	}()

	// The application: it follows the stream, drops the connection after a
	// random number of events (or a random wait), and resumes.
	type received struct {
		seq      int64
		activity string
	}
	var mu sync.Mutex
	var got []received
	var reconnects atomic.Int64
	lastID := ""
	clientDone := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			mu.Lock()
			n := len(got)
			mu.Unlock()
			if n >= total {
				clientDone <- nil
				return
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				clientDone <- fmt.Errorf("%d events received by the deadline", n)
				return
			}
			rctx, rcancel := context.WithTimeout(ctx, time.Duration(200+rng.IntN(3000))*time.Millisecond)
			limit := 1 + rng.IntN(120)
			err := readStream(rctx, "http://"+current.Load().(string)+"/users/alice/inbox/stream", alice.Token, lastID, limit,
				func(id, data string) error {
					seq, err := strconv.ParseInt(id, 10, 64)
					if err != nil {
						return fmt.Errorf("event id %q: %v", id, err)
					}
					var ev struct {
						Type   string `json:"type"`
						Object struct {
							ID string `json:"id"`
						} `json:"object"`
					}
					if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Type != "Add" {
						return fmt.Errorf("event %s: %q (%v)", id, data, err)
					}
					mu.Lock()
					got = append(got, received{seq, ev.Object.ID})
					mu.Unlock()
					lastID = id
					return nil
				})
			rcancel()
			if err != nil {
				clientDone <- err
				return
			}
			reconnects.Add(1)
			time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
		}
	}()

	// The crash: SIGKILL once about half the activities are in, then a new
	// process on other addresses.
	for accepted.Load() < total/2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d activities accepted by the deadline; output:\n%s", accepted.Load(), p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
	lnAddr2, addr2 := heldAddr(t)
	lnOps2, ops2 := heldAddr(t)
	p2 := startProcessOn(t, "courier after the crash", []net.Listener{lnAddr2, lnOps2}, args(addr2, ops2)...)
	p2.waitReady(t, ops2)
	current.Store(addr2)

	if err := <-sendDone; err != nil {
		t.Fatalf("sender: %v; output:\n%s", err, p2.stderr.String())
	}
	if err := <-clientDone; err != nil {
		t.Fatalf("client: %v; output:\n%s", err, p2.stderr.String())
	}
	p2.stop(t)

	mu.Lock()
	defer mu.Unlock()
	seen := map[string]int{}
	for i, r := range got {
		seen[r.activity]++
		if r.seq != int64(i+1) {
			t.Errorf("event %d has id %d: the ids run 1, 2, ... without a gap or a repeat", i+1, r.seq)
			break
		}
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("%s received %d times", id, seen[id])
		}
	}
	if len(got) != total || len(seen) != total {
		t.Errorf("%d events for %d activities, want %d", len(got), len(seen), total)
	}
	t.Logf("%d events over %d connections, courier SIGKILLed once", len(got), reconnects.Load()+1)
}

// readStream reads the stream at url from lastID and calls on for each
// event, until limit events, ctx's end or the connection's; only a
// malformed event (on's error) is an error: a refused or broken connection
// is what a reconnecting client meets.
func readStream(ctx context.Context, url, token, lastID string, limit int, on func(id, data string) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil // 503 while the previous connection's place is freed: retry
	}
	br := bufio.NewReader(resp.Body)
	var id string
	var data []string
	for n := 0; n < limit; {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if id != "" {
				if err := on(id, strings.Join(data, "\n")); err != nil {
					return err
				}
				n++
			}
			id, data = "", nil
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "data: "):
			data = append(data, line[6:])
		}
	}
	return nil
}
