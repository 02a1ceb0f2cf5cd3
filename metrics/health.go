package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports whether one dependency is healthy; it must return promptly
// once ctx is done.
type Check func(ctx context.Context) error

// HealthConfig tunes NewHealth. The zero value is the production setting.
type HealthConfig struct {
	// Timeout bounds one request's checks, which run concurrently (default
	// 2 s). A check still running at the deadline is reported as failed.
	Timeout time.Duration
	// Details are settings reported beside the checks (nil: none), such as
	// a guard an operator turned off.
	Details map[string]any
	// Logger receives failed checks at warn level (nil means discard).
	// Error texts are logged, never written into the response, since the
	// endpoint may be reachable from outside.
	Logger *slog.Logger
}

func (c HealthConfig) withDefaults() HealthConfig {
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// HealthReport is the JSON body of a health response.
type HealthReport struct {
	// Status is "ok" when every check passed, else "fail".
	Status string `json:"status"`
	// Checks maps each check's name to "ok", "fail" or "timeout".
	Checks map[string]string `json:"checks"`
	// Details are HealthConfig.Details.
	Details map[string]any `json:"details,omitempty"`
}

// Health returns a handler for /healthz or /readyz that runs checks on every
// GET or HEAD and answers 200 when all pass, 503 otherwise, with a
// HealthReport body. Use it twice: liveness (/healthz) with the checks whose
// failure a restart can fix (a Heartbeat of the worker loop), readiness
// (/readyz) with the dependencies (database open and migrated, NATS connected
// when the nats bus is on).
func Health(checks map[string]Check) http.Handler {
	return NewHealth(checks, HealthConfig{})
}

// NewHealth is Health with every setting exposed.
func NewHealth(checks map[string]Check, cfg HealthConfig) http.Handler {
	cfg = cfg.withDefaults()
	names := make([]string, 0, len(checks))
	for name, c := range checks {
		if c != nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	own := make(map[string]Check, len(names))
	for _, n := range names {
		own[n] = checks[n]
	}
	return &health{names: names, checks: own, cfg: cfg}
}

type health struct {
	names  []string
	checks map[string]Check
	cfg    HealthConfig
}

type checkResult struct {
	name string
	err  error
}

func (h *health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()

	// Buffered for every check, so a check that overstays the deadline
	// finishes into the buffer and its goroutine ends.
	results := make(chan checkResult, len(h.names))
	for _, name := range h.names {
		go func() {
			results <- checkResult{name: name, err: runCheck(ctx, h.checks[name])}
		}()
	}
	rep := HealthReport{Status: "ok", Checks: make(map[string]string, len(h.names)), Details: h.cfg.Details}
collect:
	for range h.names {
		select {
		case res := <-results:
			if res.err != nil {
				rep.Checks[res.name] = "fail"
				h.cfg.Logger.WarnContext(ctx, "metrics: health check failed",
					"check", res.name, "path", r.URL.Path, "err", res.err)
			} else {
				rep.Checks[res.name] = "ok"
			}
		case <-ctx.Done():
			break collect
		}
	}
	for _, name := range h.names {
		if _, ok := rep.Checks[name]; !ok {
			rep.Checks[name] = "timeout"
			h.cfg.Logger.WarnContext(ctx, "metrics: health check timed out",
				"check", name, "path", r.URL.Path, "timeout", h.cfg.Timeout)
		}
	}
	status := http.StatusOK
	for _, v := range rep.Checks {
		if v != "ok" {
			rep.Status, status = "fail", http.StatusServiceUnavailable
			break
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	_ = json.NewEncoder(w).Encode(rep) // the client is gone if this fails
}

// runCheck runs c, turning a panic into an error so one broken check cannot
// take the process down through the health endpoint.
func runCheck(ctx context.Context, c Check) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("check panicked: %v", p)
		}
	}()
	return c(ctx)
}

// ErrStale is returned by a Heartbeat check when the loop has not beaten
// within the allowed age.
var ErrStale = errors.New("metrics: heartbeat stale")

// Heartbeat lets a long-running loop (the worker's claim loop, the relay)
// prove it is alive: the loop calls Beat on each turn, and Check fails when
// the latest beat is too old. A nil *Heartbeat ignores Beat.
type Heartbeat struct {
	now  func() time.Time
	last atomic.Int64 // Unix nanoseconds of the latest beat
}

// NewHeartbeat returns a heartbeat that counts as having beaten now, so a
// liveness check gets a full period of grace at startup. A nil now means
// time.Now.
func NewHeartbeat(now func() time.Time) *Heartbeat {
	if now == nil {
		now = time.Now
	}
	h := &Heartbeat{now: now}
	h.Beat()
	return h
}

// Beat records that the loop is alive now.
func (h *Heartbeat) Beat() {
	if h == nil {
		return
	}
	h.last.Store(h.now().UnixNano())
}

// Last returns the time of the latest beat.
func (h *Heartbeat) Last() time.Time {
	if h == nil {
		return time.Time{}
	}
	return time.Unix(0, h.last.Load())
}

// Check returns a Check that fails with ErrStale when the latest beat is
// older than maxAge. Choose maxAge well above the loop's longest idle wait.
func (h *Heartbeat) Check(maxAge time.Duration) Check {
	return func(context.Context) error {
		if h == nil {
			return fmt.Errorf("%w: no heartbeat", ErrStale)
		}
		if age := h.now().Sub(h.Last()); age > maxAge {
			return fmt.Errorf("%w: last beat %s ago (max %s)", ErrStale, age.Round(time.Millisecond), maxAge)
		}
		return nil
	}
}

// Handler returns the /metrics handler for g (normally the registry given to
// New): OpenMetrics negotiation, at most 4 scrapes in flight, a 10 s timeout,
// and a partial answer rather than none when a collector fails.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
		EnableOpenMetrics:   true,
	})
}
