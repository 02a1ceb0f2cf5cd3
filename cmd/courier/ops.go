package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/store"
)

// knownLabels are the label values every process knows from the start: its
// metrics show them at 0 on a fresh instance.
func knownLabels() metrics.Known {
	return metrics.Known{
		EventTypes: []string{activitypub.EventOutgoing, activitypub.EventForward, delivery.EventPost, inbox.EventReceived,
			store.EventPollUpdate, inbox.EventFollowersSync},
		Handlers: []string{delivery.HandlerFanout, delivery.HandlerForward, delivery.HandlerPost, inbox.HandlerImport,
			inbox.HandlerPollUpdate, inbox.HandlerFollowersSync},
		HostStates:           []string{delivery.HostHealthy, delivery.HostFailing, delivery.HostUnavailable, delivery.HostPaused},
		FollowersSyncResults: inbox.FollowersSyncResults(),
	}
}

// inherited are listeners this process was handed already open, by the
// address they are bound to; a listen address found here is served on that
// listener instead of a new one. Only the tests' child processes set it,
// before run, so that the parent holds each port from first to last and
// nothing else can take it in between.
var inherited map[string]net.Listener

// openListener is the listener of addr: one handed over already open
// (Config.listeners, then inherited), else a new one.
func (a *app) openListener(addr string) (net.Listener, error) {
	if ln, ok := a.cfg.listeners[addr]; ok {
		return ln, nil
	}
	if ln, ok := inherited[addr]; ok {
		return ln, nil
	}
	return net.Listen("tcp", addr)
}

// listen opens the operators' listener and, with serveHTTP, the public one.
// Each error names the address and the setting to change.
func (a *app) listen(serveHTTP bool) error {
	ops, err := a.openListener(a.cfg.OpsListen)
	if err != nil {
		if !serveHTTP {
			return fmt.Errorf("listen on %s for /metrics and health: %w (set --ops-listen or %s to a free address)", a.cfg.OpsListen, err, workerOpsEnv)
		}
		return fmt.Errorf("listen on %s for the operators' endpoints: %w (set --ops-listen or COURIER_OPS_LISTEN to a free address)", a.cfg.OpsListen, err)
	}
	a.opsListener = ops
	if !serveHTTP {
		return nil
	}
	ln, err := a.openListener(a.cfg.Listen)
	if err != nil {
		ops.Close()
		return fmt.Errorf("listen on %s: %w", a.cfg.Listen, err)
	}
	a.listener = ln
	return nil
}

// newHTTPServer is the HTTP server of both listeners, with bounded reads,
// writes and headers.
func newHTTPServer(h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}
