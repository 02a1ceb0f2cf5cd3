package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/server"
	"github.com/courier-ap/courier/sqlite"
	"github.com/courier-ap/courier/store"
)

// httpShutdownGrace bounds how long in-flight HTTP requests may finish.
const httpShutdownGrace = 10 * time.Second

// app is one courier process: the HTTP server, the worker, or both.
type app struct {
	cfg      Config
	logger   *slog.Logger
	db       *sqlite.DB
	store    *store.Store
	reg      *prometheus.Registry
	metrics  *metrics.Metrics
	registry *outbox.Registry
	beat     *metrics.Heartbeat

	listener net.Listener // set by serve
	router   *mux.Router
	worker   *outbox.Worker
}

// newApp opens and migrates the database and builds every component the
// process runs. serveHTTP adds the HTTP server; cfg.Worker adds the worker.
func newApp(ctx context.Context, cfg Config, logger *slog.Logger, serveHTTP bool) (*app, error) {
	db, err := openDB(ctx, cfg, logger)
	if err != nil {
		return nil, err
	}
	a := &app{
		cfg:      cfg,
		logger:   logger,
		db:       db,
		store:    store.New(db, cfg.base(), time.Now),
		reg:      prometheus.NewRegistry(),
		registry: outbox.NewRegistry(),
		beat:     metrics.NewHeartbeat(nil),
	}
	a.metrics = metrics.New(a.reg, metrics.ReadBuildInfo(version))
	if cfg.Worker {
		if err := a.buildWorker(); err != nil {
			db.Close()
			return nil, err
		}
	}
	if serveHTTP {
		if err := a.buildHTTP(); err != nil {
			db.Close()
			return nil, err
		}
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
		}
		a.listener = ln
	}
	return a, nil
}

func (a *app) buildWorker() error {
	o := a.metrics.Outbox()
	obs := &outbox.Observer{
		Handled:       o.Handled,
		LedgerClaimed: o.LedgerClaimed,
		DeadLettered:  o.DeadLettered,
		Claimed: func(n int) {
			a.beat.Beat()
			o.Claimed(n)
		},
		Settled: func(typ string, out outbox.Outcome) { o.Settled(typ, out.String()) },
	}
	w, err := outbox.NewWorker(outbox.WorkerConfig{
		DB:          a.db.Write,
		Read:        a.db.Read,
		Registry:    a.registry,
		Concurrency: a.cfg.Concurrency,
		MaxAttempts: a.cfg.MaxAttempts,
		Logger:      a.logger,
		Observer:    obs,
	})
	if err != nil {
		return err
	}
	a.worker = w
	a.db.OnWrite(w.Notify)
	return nil
}

func (a *app) buildHTTP() error {
	srv, err := server.New(server.Config{Store: a.store, Logger: a.logger, Version: version})
	if err != nil {
		return err
	}
	r := mux.NewRouter()
	r.Handle("/metrics", metrics.Handler(a.reg)).Methods(http.MethodGet)
	r.Handle("/healthz", metrics.Health(a.liveness())).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/readyz", metrics.Health(a.readiness())).Methods(http.MethodGet, http.MethodHead)
	srv.Register(r)
	a.router = r
	return nil
}

func (a *app) liveness() map[string]metrics.Check {
	checks := map[string]metrics.Check{}
	if a.worker != nil {
		checks["worker"] = a.beat.Check(2 * time.Minute)
	}
	return checks
}

func (a *app) readiness() map[string]metrics.Check {
	checks := map[string]metrics.Check{
		"db": func(ctx context.Context) error {
			_, err := migrations.Current(ctx, a.db.Read, migrations.Latest())
			return err
		},
	}
	if a.worker != nil {
		checks["worker"] = a.beat.Check(2 * time.Minute)
	}
	return checks
}

// Run serves until ctx ends, then shuts down in order: HTTP first (no new
// writes), then the worker (stop claiming, let running handlers finish
// within their grace, release the rest), then the database.
func (a *app) Run(ctx context.Context) error {
	defer a.db.Close()
	workerCtx, stopWorker := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorker()
	g, gctx := errgroup.WithContext(ctx)
	var hs *http.Server
	if a.listener != nil {
		hs = &http.Server{
			Handler:           a.router,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      60 * time.Second,
			IdleTimeout:       120 * time.Second,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn),
		}
		a.logger.Info("listening", "addr", a.listener.Addr().String(), "base_url", a.cfg.base())
		g.Go(func() error {
			if err := hs.Serve(a.listener); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http: %w", err)
			}
			return nil
		})
	}
	if a.worker != nil {
		a.logger.Info("worker started", "bus", a.cfg.Bus, "concurrency", a.cfg.Concurrency)
		g.Go(func() error { return a.worker.Run(workerCtx) })
	}
	g.Go(func() error {
		<-gctx.Done()
		if hs != nil {
			sctx, cancel := context.WithTimeout(context.Background(), httpShutdownGrace)
			defer cancel()
			if err := hs.Shutdown(sctx); err != nil {
				a.logger.Warn("http shutdown", "err", err)
			}
		}
		stopWorker()
		return nil
	})
	err := g.Wait()
	a.logger.Info("stopped")
	return err
}

func runProcess(ctx context.Context, cfg Config, logger *slog.Logger, serveHTTP bool) error {
	a, err := newApp(ctx, cfg, logger, serveHTTP)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
