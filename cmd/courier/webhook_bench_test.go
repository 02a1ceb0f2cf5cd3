package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
)

// BenchmarkWebhookLatency measures, in one run of the real server (inbox,
// importer, outbox worker, delivery's webhook path, on the store
// storetest opens), the time from an inbound Create's 202 to its
// activity.create webhook at a verifying endpoint on loopback, p50 and
// p99, and the webhooks delivered per second over the inbound activities
// accepted per second. 500 activities per iteration, from 8 concurrent
// senders of one remote host (each request signed).
//
//	go test ./cmd/courier -run '^$' -bench BenchmarkWebhookLatency -benchtime 1x
func BenchmarkWebhookLatency(b *testing.B) {
	key, err := activitypub.GenerateKey()
	if err != nil {
		b.Fatal(err)
	}
	remote := httptest.NewServer(nil)
	actorID := remote.URL + "/users/r"
	remote.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pem, _ := activitypub.EncodePublicKeyPEM(&key.PublicKey)
		doc, _ := activitypub.MarshalActorDocument(&activitypub.Actor{ID: actorID, Type: "Person", PreferredUsername: "r",
			Inbox: actorID + "/inbox", PublicKey: activitypub.PublicKey{ID: actorID + "#main-key", Owner: actorID, PublicKeyPem: pem}})
		w.Header().Set("Content-Type", activitypub.ContentType)
		w.Write(doc)
	})
	b.Cleanup(remote.Close)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := defaultConfig()
	cfg.DB = storetest.Location(b)
	cfg.Synchronous = "NORMAL"
	cfg.Listen = addr
	cfg.OpsListen = "127.0.0.1:0"
	cfg.BaseURL = "http://" + addr
	cfg.AllowPrivateAddresses = true
	cfg.InboxHostRequests = 1 << 30
	cfg.InboxHostBytes = 1 << 30
	ctx, cancel := context.WithCancel(context.Background())
	a, err := newApp(ctx, cfg, slog.New(slog.DiscardHandler), true)
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	alice, _, err := a.store.CreateActor(ctx, store.NewActor{Name: "alice"})
	if err != nil {
		b.Fatal(err)
	}

	// The endpoint: verified by courier's own scheme's arithmetic is not
	// the point here (the tests verify with the Standard Webhooks
	// library); it records when each activity's webhook arrived.
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	got := make(chan struct{}, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		body, _ := io.ReadAll(r.Body)
		var p struct {
			Type string
			Data struct {
				ActivityID string `json:"activity_id"`
			}
		}
		_ = json.Unmarshal(body, &p)
		mu.Lock()
		if _, ok := arrived[p.Data.ActivityID]; !ok && p.Type == "activity.create" {
			arrived[p.Data.ActivityID] = at
		}
		mu.Unlock()
		select {
		case got <- struct{}{}:
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(hook.Close)
	if _, _, err := a.webhooks.Add(ctx, hook.URL, "alice", []string{"activity.create"}); err != nil {
		b.Fatal(err)
	}

	n := 500 * b.N
	accepted := make([]time.Time, n)
	ids := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	client := &http.Client{Timeout: time.Minute}
	b.ResetTimer()
	start := time.Now()
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				id := fmt.Sprintf("%s/activities/%d", remote.URL, i)
				act := map[string]any{"@context": activitypub.ActivityStreams, "id": id, "type": "Create", "actor": actorID,
					"to": []string{alice.URI},
					"object": map[string]any{"id": fmt.Sprintf("%s/notes/%d", remote.URL, i), "type": "Note", "attributedTo": actorID,
						"to": []string{alice.URI}, "content": "hello"}}
				body, _ := json.Marshal(act)
				req, _ := http.NewRequest(http.MethodPost, cfg.BaseURL+"/users/alice/inbox", bytes.NewReader(body))
				req.Header.Set("Content-Type", activitypub.ContentType)
				if err := activitypub.SignRequest(req, body, actorID+"#main-key", key, time.Now()); err != nil {
					b.Error(err)
					return
				}
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					b.Errorf("inbox answered %d", resp.StatusCode)
					return
				}
				accepted[i], ids[i] = time.Now(), id
			}
		})
	}
	wg.Wait()
	lastAccepted := time.Now()
	deadline := time.After(5 * time.Minute)
	for {
		mu.Lock()
		k := len(arrived)
		mu.Unlock()
		if k >= n {
			break
		}
		select {
		case <-got:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			b.Fatalf("%d of %d webhooks arrived in 5 minutes", k, n)
		}
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	lat := make([]time.Duration, 0, n)
	var firstHook, lastHook time.Time
	for i, id := range ids {
		at := arrived[id]
		lat = append(lat, at.Sub(accepted[i]))
		if firstHook.IsZero() || at.Before(firstHook) {
			firstHook = at
		}
		if at.After(lastHook) {
			lastHook = at
		}
	}
	slices.Sort(lat)
	inRate := float64(n) / lastAccepted.Sub(start).Seconds()
	hookRate := float64(n) / lastHook.Sub(start).Seconds()
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(inRate, "accepted/s")
	b.ReportMetric(hookRate, "webhooks/s")
	b.ReportMetric(hookRate/inRate, "webhooks/accepted")
}
