package app_test

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/app"
)

// TestStreamStalledClientClosed: eight streams replaying an inbox of 100
// items of 400 KiB from Last-Event-ID 0 to clients that read nothing hold
// a bounded amount of memory (one item each, not a batch of 100), and
// each is closed once a write has waited its WriteTimeout, its place
// freed. The peak of the live heap over the streams' life is logged.
func TestStreamStalledClientClosed(t *testing.T) {
	const (
		streams  = 8
		items    = 100
		itemSize = 400 << 10
	)
	b := setup(t, app.Config{WriteTimeout: 2 * time.Second, MaxStreamsPerActor: streams, KeepAlive: time.Hour})
	alice, tok := b.actor(t, "alice", false)
	pad := strings.Repeat("x", itemSize)
	err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
		for i := 1; i <= items; i++ {
			uri := fmt.Sprintf("https://remote.example/activities/%d", i)
			doc := fmt.Sprintf(`{"id":%q,"type":"Create","actor":"https://remote.example/users/r","object":{"type":"Note","content":%q}}`, uri, pad)
			if _, err := tx.Exec(`INSERT INTO app_inbox_items (actor_id, seq, activity_uri, type, kind, document, created_at)
				VALUES (?, ?, ?, 'Create', '', ?, 0)`, alice.ID, i, uri, doc); err != nil {
				return err
			}
		}
		_, err := tx.Exec(`INSERT INTO app_inbox_counters (actor_id, seq) VALUES (?, ?)`, alice.ID, items)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	pad = ""
	live := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := live()

	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	for range streams {
		s, resp := openStream(t, ctx, b.base+"/users/alice/inbox/stream", tok, "0")
		if s == nil {
			t.Fatalf("stream: %d", resp.StatusCode)
		}
		defer s.close() // read nothing
	}
	var peak uint64
	deadline := testDeadline(t)
	for b.app.Streams() > 0 {
		if n := live(); n > base && n-base > peak {
			peak = n - base
		}
		if time.Now().After(deadline) {
			t.Logf("%d idle streams: live heap peaked %.1f MiB over the %.1f MiB before them", streams, mib(peak), mib(base))
			t.Fatalf("%d streams still open, their clients reading nothing", b.app.Streams())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d idle streams: live heap peaked %.1f MiB over the %.1f MiB before them; all closed", streams, mib(peak), mib(base))
	if limit := uint64(streams) * 8 << 20; peak > limit {
		t.Errorf("%d idle streams held %.1f MiB, over %.1f MiB", streams, mib(peak), mib(limit))
	}
	// Their places are free: a new stream is admitted.
	s, resp := openStream(t, ctx, b.base+"/users/alice/inbox/stream", tok, "")
	if s == nil {
		t.Fatalf("a stream after the stalled ones closed: %d", resp.StatusCode)
	}
	s.close()
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }
