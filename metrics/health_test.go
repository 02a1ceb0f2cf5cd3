package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/metrics"
)

// syncBuffer is a log sink safe for the handler's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func get(t *testing.T, srv *httptest.Server, method string) (int, metrics.HealthReport, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	var rep metrics.HealthReport
	if method == http.MethodGet && resp.StatusCode != http.StatusMethodNotAllowed {
		if err := json.Unmarshal(body, &rep); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
	}
	return resp.StatusCode, rep, string(body)
}

func TestHealth(t *testing.T) {
	t.Parallel()
	secret := errors.New("open /var/lib/courier/courier.db: permission denied")
	var dbDown bool
	var mu sync.Mutex
	logs := &syncBuffer{}
	h := metrics.NewHealth(map[string]metrics.Check{
		"db": func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if dbDown {
				return secret
			}
			return nil
		},
		"nats": func(context.Context) error { return nil },
		"none": nil, // ignored
	}, metrics.HealthConfig{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	code, rep, _ := get(t, srv, http.MethodGet)
	if code != http.StatusOK || rep.Status != "ok" || rep.Checks["db"] != "ok" || rep.Checks["nats"] != "ok" || len(rep.Checks) != 2 {
		t.Fatalf("healthy: %d %+v", code, rep)
	}

	mu.Lock()
	dbDown = true
	mu.Unlock()
	code, rep, body := get(t, srv, http.MethodGet)
	if code != http.StatusServiceUnavailable || rep.Status != "fail" || rep.Checks["db"] != "fail" || rep.Checks["nats"] != "ok" {
		t.Fatalf("db down: %d %+v", code, rep)
	}
	if strings.Contains(body, "permission") {
		t.Fatalf("response leaks the error text: %s", body)
	}
	if !strings.Contains(logs.String(), "permission denied") || !strings.Contains(logs.String(), "check=db") {
		t.Fatalf("failed check not logged with its error: %s", logs.String())
	}

	if code, _, body := get(t, srv, http.MethodHead); code != http.StatusServiceUnavailable || body != "" {
		t.Fatalf("HEAD: %d %q", code, body)
	}
	if code, _, _ := get(t, srv, http.MethodPost); code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", code)
	}
}

func TestHealthBoundsSlowAndPanickingChecks(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	h := metrics.NewHealth(map[string]metrics.Check{
		// Ignores its context: the handler must answer anyway.
		"stuck":  func(context.Context) error { <-release; return nil },
		"panics": func(context.Context) error { panic("boom") },
		"fine":   func(context.Context) error { return nil },
	}, metrics.HealthConfig{Timeout: 100 * time.Millisecond})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	start := time.Now()
	code, rep, _ := get(t, srv, http.MethodGet)
	// Without the timeout the stuck check would hold the answer for ever;
	// the bound is generous so that a loaded machine does not fail it.
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("health answered after %s with a 100 ms timeout", took)
	}
	want := map[string]string{"stuck": "timeout", "panics": "fail", "fine": "ok"}
	if code != http.StatusServiceUnavailable || len(rep.Checks) != 3 {
		t.Fatalf("%d %+v", code, rep)
	}
	for k, v := range want {
		if rep.Checks[k] != v {
			t.Errorf("check %s = %q, want %q", k, rep.Checks[k], v)
		}
	}
}

func TestHealthWithoutChecksIsOK(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(metrics.Health(nil))
	t.Cleanup(srv.Close)
	if code, rep, _ := get(t, srv, http.MethodGet); code != http.StatusOK || rep.Status != "ok" {
		t.Fatalf("%d %+v", code, rep)
	}
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	hb := metrics.NewHeartbeat(clock)
	check := hb.Check(30 * time.Second)
	if err := check(t.Context()); err != nil {
		t.Fatalf("fresh heartbeat: %v", err)
	}
	advance(31 * time.Second)
	if err := check(t.Context()); !errors.Is(err, metrics.ErrStale) {
		t.Fatalf("after 31 s without a beat: %v, want ErrStale", err)
	}
	hb.Beat()
	if err := check(t.Context()); err != nil {
		t.Fatalf("after a beat: %v", err)
	}
	if !hb.Last().Equal(clock()) {
		t.Fatalf("Last() = %v, want %v", hb.Last(), clock())
	}
}
