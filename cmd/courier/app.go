package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/courier-ap/courier/activitypub"
	application "github.com/courier-ap/courier/app"
	"github.com/courier-ap/courier/app/webhook"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/limit"
	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/outbox/natsbus"
	"github.com/courier-ap/courier/relay"
	"github.com/courier-ap/courier/server"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/store"
)

const (
	// httpShutdownGrace bounds how long in-flight HTTP requests may finish.
	httpShutdownGrace = 10 * time.Second
	// livenessMaxAge is how long the worker loop may go without a turn
	// before /healthz fails; the loop turns at least every second when idle.
	livenessMaxAge = 2 * time.Minute
)

// bus is the part of the worker that claims events: the db worker or the
// JetStream bus.
type bus interface {
	Run(ctx context.Context) error
	Notify()
}

// app is one courier process: the HTTP server, the worker, or both. Every
// process serves /metrics, /healthz and /readyz on its operators' listener
// (--ops-listen); the server adds /admin/ and the console there, and the
// ActivityPub surface with /healthz on the public one (--listen).
type app struct {
	cfg      Config
	logger   *slog.Logger
	db       *sqldb.DB
	store    *store.Store
	reg      *prometheus.Registry
	metrics  *metrics.Metrics
	registry *outbox.Registry
	queue    *outbox.Queue
	beat     *metrics.Heartbeat
	resolver *activitypub.Resolver
	delivery *delivery.Service
	// webhooks keeps the webhook endpoints and builds their POSTs.
	webhooks *webhook.Service

	listener    net.Listener // public; nil in a worker-only process
	router      *mux.Router
	opsListener net.Listener
	opsRouter   *mux.Router

	failures *limit.Failures // failed bearer tokens, admin API and outbox alike
	inbox    *inbox.Handler  // nil in a worker-only process

	bus      bus          // nil when this process runs no worker
	nats     *natsbus.Bus // set with --bus nats
	importer *inbox.Importer

	recorder    *application.Recorder // the application's inbox views
	application *application.Handler  // nil in a worker-only process
}

// newApp opens and migrates the database and builds every component the
// process runs. serveHTTP adds the ActivityPub surface, the inbox and the
// admin API; cfg.Worker adds the worker.
func newApp(ctx context.Context, cfg Config, logger *slog.Logger, serveHTTP bool) (_ *app, err error) {
	db, err := openDB(ctx, cfg, logger, true)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			db.Close()
		}
	}()
	a := &app{
		cfg:      cfg,
		logger:   logger,
		db:       db,
		store:    store.New(db, cfg.base(), time.Now),
		reg:      prometheus.NewRegistry(),
		registry: outbox.NewRegistry(),
		queue:    outbox.NewQueue(db.Write, outbox.QueueOptions{Read: db.Read}),
		beat:     metrics.NewHeartbeat(nil),
		failures: limit.NewFailures(nil),
	}
	if cfg.AllowPrivateAddresses {
		logger.Warn("COURIER_ALLOW_PRIVATE_ADDRESSES is on: courier fetches from and delivers to loopback and private addresses; never set it on a server reachable from the internet",
			"allow_private_addresses", true)
	}
	a.metrics = metrics.New(a.reg, metrics.ReadBuildInfo(version))
	a.metrics.Init(knownLabels())
	a.metrics.WatchQueue(metrics.QueueFuncs{
		Rows: func(ctx context.Context) (map[string]map[string]int64, error) {
			st, err := a.queue.Stats(ctx)
			return st, err
		},
		OldestDue: a.queue.OldestPendingDue,
	})
	if err := a.buildRecorder(); err != nil {
		return nil, err
	}
	if err := a.buildFederation(ctx); err != nil {
		return nil, err
	}
	// Each item an import records enqueues its webhook events in the
	// import's own transaction.
	a.recorder.AddHook(a.webhooks.Hook)
	if cfg.Worker {
		if err := a.buildWorker(); err != nil {
			return nil, err
		}
	}
	if err := a.buildHTTP(serveHTTP); err != nil {
		return nil, err
	}
	if err := a.listen(serveHTTP); err != nil {
		return nil, err
	}
	return a, nil
}

// buildFederation builds what both the server and the worker need: the
// guarded HTTP client, signed fetches as the instance actor, the remote
// actor resolver and the delivery service (whose host health the inbox
// feeds with signs of life and the admin API operates).
func (a *app) buildFederation(ctx context.Context) error {
	inst, err := a.store.InstanceActor(ctx)
	if err != nil {
		return err
	}
	// The commands given no --base-url build their ids from it.
	if err := a.store.RecordBaseURL(ctx); err != nil {
		return err
	}
	client := activitypub.NewClient(activitypub.ClientOptions{
		AllowPrivate: a.cfg.AllowPrivateAddresses,
		UserAgent:    userAgent(a.cfg),
		// Fetches never wait on a host that is slow or already busy.
		Gate: activitypub.NewFetchGate(activitypub.FetchGateOptions{}),
	})
	fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{Client: client, Signer: inst.Signer(), Logger: a.logger})
	if err != nil {
		return err
	}
	a.resolver, err = activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: a.store, Logger: a.logger})
	if err != nil {
		return err
	}
	// Webhook endpoints may be on loopback or a private network (the
	// operator's own services), but not at link-local or cloud metadata
	// addresses unless named, when courier refuses private addresses.
	webhookAllow, err := a.cfg.webhookAllowAddrs()
	if err != nil {
		return err
	}
	denyMetadata := !a.cfg.AllowPrivateAddresses
	wcfg := webhook.Config{DB: a.db, Logger: a.logger, DenyMetadata: denyMetadata, AllowAddrs: webhookAllow,
		Metrics: a.metrics.Webhook()}
	if denyMetadata {
		wcfg.RefuseAddr = func(ip netip.Addr) bool {
			return activitypub.MetadataAddr(ip) && !activitypub.AddrAllowed(ip, webhookAllow)
		}
	}
	a.webhooks, err = webhook.New(wcfg)
	if err != nil {
		return err
	}
	a.delivery, err = delivery.New(delivery.Config{
		Channels:         []delivery.Channel{a.webhooks},
		Outcomes:         a.webhooks,
		MaxAttempts:      a.cfg.MaxAttempts,
		DB:               a.db,
		Store:            a.store,
		Resolver:         a.resolver,
		Objects:          fetcher,
		LocalInbox:       inbox.Local{},
		BaseURL:          a.cfg.base(),
		AllowPrivate:     a.cfg.AllowPrivateAddresses,
		Version:          version,
		UserAgent:        userAgent(a.cfg),
		ParkMax:          a.cfg.ParkMax,
		Timeout:          a.cfg.DeliveryTimeout,
		UnavailableAfter: a.cfg.UnavailableAfter,
		ProbeInterval:    a.cfg.ProbeInterval,
		ParkRecheck:      a.cfg.ParkRecheck,
		Logger:           a.logger,
		Metrics:          a.metrics.Delivery(),
	})
	if err != nil {
		return err
	}
	a.metrics.WatchHosts(a.delivery.Health())
	return nil
}

// mentions resolves @user@host in a client's Mention by WebFinger over
// https (and, with --allow-private-addresses, over http when https fails,
// for peers on loopback), through the guarded client.
func (a *app) mentions() func(ctx context.Context, user, host string) (string, error) {
	client := activitypub.NewClient(activitypub.ClientOptions{
		AllowPrivate: a.cfg.AllowPrivateAddresses, UserAgent: userAgent(a.cfg), Timeout: 10 * time.Second,
	})
	return func(ctx context.Context, user, host string) (string, error) {
		id, err := activitypub.WebFinger(ctx, client, "https", user, host)
		if err != nil && a.cfg.AllowPrivateAddresses {
			var se *activitypub.StatusError
			if !errors.Is(err, activitypub.ErrNotFound) && !errors.As(err, &se) {
				id, err = activitypub.WebFinger(ctx, client, "http", user, host)
			}
		}
		return id, err
	}
}

func userAgent(cfg Config) string {
	return fmt.Sprintf("courier/%s (+%s)", version, cfg.base())
}

func (a *app) buildWorker() error {
	o := a.metrics.Outbox()
	obs := &outbox.Observer{
		Handled:       o.Handled,
		LedgerClaimed: o.LedgerClaimed,
		DeadLettered:  o.DeadLettered,
		Claimed:       o.Claimed,
		Enqueued:      o.Enqueued,
		Alive:         a.beat.Beat,
		Settled:       func(typ string, out outbox.Outcome) { o.Settled(typ, out.String()) },
	}
	a.delivery.Register(a.registry)
	rs, err := relay.New(relay.Config{Store: a.store, Resolver: a.resolver, Logger: a.logger,
		Client: activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: a.cfg.AllowPrivateAddresses, UserAgent: userAgent(a.cfg)})})
	if err != nil {
		return err
	}
	rs.Register(a.registry)
	im, err := inbox.NewImporter(inbox.Config{
		DB:       a.db,
		Store:    a.store,
		Resolver: a.resolver,
		Logger:   a.logger,
		Metrics:  a.metrics.Inbox(),
		App:      a.recorder,
	})
	if err != nil {
		return err
	}
	im.Register(a.registry)
	a.importer = im

	if a.cfg.Bus == "nats" {
		runner, err := outbox.NewRunner(outbox.RunnerConfig{
			DB:          a.db.Write,
			Registry:    a.registry,
			MaxAttempts: a.cfg.MaxAttempts,
			LedgerLease: a.cfg.LedgerLease,
			Logger:      a.logger,
			Observer:    obs,
		})
		if err != nil {
			return err
		}
		mode, err := natsbus.ParseMode(a.cfg.NATSMode)
		if err != nil {
			return err
		}
		nb, err := natsbus.New(natsbus.Config{
			URL:         a.cfg.NATSURL,
			Mode:        mode,
			MaxAttempts: a.cfg.MaxAttempts,
			DB:          a.db.Write,
			Queue:       a.queue,
			Runner:      runner,
			AckWait:     a.cfg.NATSAckWait,
			Lease:       a.cfg.Lease,
			Concurrency: a.cfg.Concurrency,
			Beat:        a.beat.Beat,
			Gauges:      a.metrics.Relay(),
			Logger:      a.logger,
			Registerer:  a.reg,
		})
		if err != nil {
			return err
		}
		a.nats, a.bus = nb, nb
	} else {
		w, err := outbox.NewWorker(outbox.WorkerConfig{
			DB:          a.db.Write,
			Read:        a.db.Read,
			Registry:    a.registry,
			Concurrency: a.cfg.Concurrency,
			MaxAttempts: a.cfg.MaxAttempts,
			Lease:       a.cfg.Lease,
			LedgerLease: a.cfg.LedgerLease,
			Logger:      a.logger,
			Observer:    obs,
		})
		if err != nil {
			return err
		}
		a.bus = w
	}
	// Wake the worker when this process commits events (a worker in the
	// server process sees the server's writes at once; others poll).
	a.db.OnWrite(a.bus.Notify)
	return nil
}

// buildHTTP builds the routers: the operators' endpoints always; with
// serveHTTP the public ActivityPub surface and the inbox, and the admin API
// and the console on the operators' router.
func (a *app) buildHTTP(serveHTTP bool) error {
	ops := mux.NewRouter()
	ops.Handle("/metrics", metrics.Handler(a.reg)).Methods(http.MethodGet)
	ops.Handle("/healthz", metrics.Health(a.liveness())).Methods(http.MethodGet, http.MethodHead)
	ops.Handle("/readyz", metrics.NewHealth(a.readiness(), metrics.HealthConfig{
		Details: map[string]any{"allow_private_addresses": a.cfg.AllowPrivateAddresses},
	})).Methods(http.MethodGet, http.MethodHead)
	// Writes made while serving a request count their events.
	enqueued := a.metrics.Outbox().Enqueued
	countEnqueued := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			next.ServeHTTP(w, req.WithContext(outbox.WithEnqueueObserver(req.Context(), enqueued)))
		})
	}
	ops.Use(countEnqueued)
	ops.NotFoundHandler = httpedge.NotFoundHandler()
	ops.MethodNotAllowedHandler = httpedge.MethodNotAllowedHandler(ops)
	a.opsRouter = ops
	if !serveHTTP {
		return nil
	}
	r := mux.NewRouter()
	// Load balancers probe the public port.
	r.Handle("/healthz", metrics.Health(a.liveness())).Methods(http.MethodGet, http.MethodHead)
	srv, err := server.New(server.Config{Store: a.store, Logger: a.logger, Version: version,
		Keys: a.resolver, AuthorizedFetch: a.cfg.AuthorizedFetch, Failures: a.failures,
		Mentions: a.mentions(), AllowPrivateAddresses: a.cfg.AllowPrivateAddresses,
		OutboxStream: true}) // registerApplication mounts it
	if err != nil {
		return err
	}
	budgets, err := a.cfg.hostBudgets()
	if err != nil {
		return err
	}
	in, err := inbox.New(inbox.Config{
		DB:         a.db,
		Store:      a.store,
		Resolver:   a.resolver,
		DateWindow: a.cfg.DateWindow,
		Logger:     a.logger,
		Metrics:    a.metrics.Inbox(),
		Health:     a.delivery.Health(),
		Schemes:    a.delivery.Schemes(),

		HostRequestsPerMinute: float64(a.cfg.InboxHostRequests),
		HostBytesPerMinute:    int64(a.cfg.InboxHostBytes),
		HostBudgetFactors:     budgets,
	})
	if err != nil {
		return err
	}
	in.Register(r)
	a.inbox = in
	if err := a.registerApplication(r); err != nil {
		return err
	}
	// The admin API shows the inbox's budgets: registered after it.
	if err := a.registerOps(ops); err != nil {
		return err
	}
	srv.Register(r)
	r.Use(countEnqueued)
	// Every error of the public listener is the JSON error body, unknown
	// paths (GET /) and methods included.
	r.NotFoundHandler = httpedge.NotFoundHandler()
	r.MethodNotAllowedHandler = httpedge.MethodNotAllowedHandler(r)
	a.router = r
	return nil
}

func (a *app) liveness() map[string]metrics.Check {
	checks := map[string]metrics.Check{}
	if a.bus != nil {
		checks["worker"] = a.beat.Check(livenessMaxAge)
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
	if a.bus != nil {
		checks["worker"] = a.beat.Check(livenessMaxAge)
	}
	if a.nats != nil {
		checks["nats"] = func(context.Context) error { return a.nats.Ready() }
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
	var servers []*http.Server
	serve := func(ln net.Listener, h http.Handler, what string) {
		hs := newHTTPServer(h, a.logger)
		a.endStreams(hs)
		servers = append(servers, hs)
		g.Go(func() error {
			if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http %s: %w", what, err)
			}
			return nil
		})
	}
	if a.listener != nil {
		a.logger.Info("listening", "addr", a.listener.Addr().String(), "base_url", a.cfg.base())
		serve(a.listener, a.router, "public")
	}
	a.logger.Info("ops listening", "addr", a.opsListener.Addr().String())
	serve(a.opsListener, newOpsHosts(a.cfg.OpsListen, a.cfg.OpsHosts, a.logger).wrap(a.opsRouter), "ops")
	if a.bus != nil {
		a.logger.Info("worker started", "bus", a.cfg.Bus, "concurrency", a.cfg.Concurrency)
		g.Go(func() error { return a.bus.Run(workerCtx) })
		g.Go(func() error { return a.importer.Run(workerCtx) })
		// This process delivers: it takes its share of each host's
		// per-host concurrency among the processes that do.
		g.Go(func() error { return a.delivery.Announce(workerCtx) })
		if a.nats != nil { // the db worker runs its own Sweeper
			g.Go(func() error { return outbox.Sweeper{Queue: a.queue, Logger: a.logger}.Run(workerCtx) })
		}
	}
	// Delivery's recorder and sweeper run in every process: the server's
	// admin API and signs of life write through it too.
	g.Go(func() error { return a.delivery.Run(workerCtx) })
	// Deleted actors' keys go once their Delete is past delivery.
	g.Go(func() error {
		return store.KeyReaper{Store: a.store, Deliveries: a.deliveryDone(), Logger: a.logger}.Run(workerCtx)
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), httpShutdownGrace)
		defer cancel()
		for _, hs := range servers {
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

// deliveryDone is what the key reaper asks before removing a deleted
// actor's key.
func (a *app) deliveryDone() store.DeliveryFinisher {
	return deliveryDone{queue: a.queue, delivery: a.delivery}
}

func runProcess(ctx context.Context, cfg Config, logger *slog.Logger, serveHTTP bool) error {
	a, err := newApp(ctx, cfg, logger, serveHTTP)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
