package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// Bounds of the run's own waits.
const (
	keepInterval   = 200 * time.Millisecond // how often a dead process is restarted
	settleInterval = 2 * time.Second        // how often the settle phase reads the database
	quietFor       = 3 * time.Second        // remote inboxes idle this long count as quiet
	stopGrace      = 15 * time.Second       // SIGTERM to SIGKILL when the run ends
	actorCreateMax = 30 * time.Second       // one `courier actor create`
	readyTimeout   = 30 * time.Second       // the server answering /readyz
	resendShare    = 0.05                   // inbound activities sent again after their ack
	parkGrace      = 30 * time.Second       // beyond --park-max, for parked deliveries to be dead-lettered
)

// ErrSetup is returned (wrapped) when the run could not get courier and
// the remote hosts into the state the write phase starts from.
var ErrSetup = errors.New("chaos: set-up")

// run is the state of one run.
type run struct {
	cfg    Config
	logger *slog.Logger
	rng    *rand.Rand

	dir    string
	dbPath string // the SQLite file, or with PostgreSQL the run's DSN
	base   string
	listen string
	ops    []string // each server's operators' base URL
	pg     *pgRun   // nil on SQLite
	front  *front   // nil with one server

	broker  *broker
	hosts   []*remoteHost
	bh      *remoteHost
	rec     *recorder
	keys    *keyring
	locals  []*localActor
	servers []*child
	workers []*child
	writer  *writer
	sender  *sender
	world   *world
	conv    *converger // convergence runs only

	brokerStops int
	outages     int
}

// Run performs one chaos run and returns its report. The error is non-nil
// when the run could not be carried out (set-up failed, the deadline or ctx
// ended it); whether courier passed is Report.Failure.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, logger: cfg.Logger, rng: rand.New(rand.NewPCG(cfg.Seed, 0)), rec: &recorder{}, keys: newKeyring()}
	ctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
	defer cancel()
	start := time.Now()

	if err := r.prepareDir(); err != nil {
		return nil, err
	}
	rep, err := r.execute(ctx)
	r.shutdown()
	if rep != nil {
		rep.Elapsed = time.Since(start)
	}
	passed := err == nil && rep != nil && rep.Failure() == nil
	if cfg.Dir == "" && passed && !cfg.Keep {
		if rmErr := os.RemoveAll(r.dir); rmErr != nil {
			r.logger.Warn("remove run directory", "dir", r.dir, "err", rmErr)
		}
	} else {
		r.logger.Info("run directory kept", "dir", r.dir)
	}
	return rep, err
}

func (r *run) prepareDir() error {
	r.dir = r.cfg.Dir
	if r.dir == "" {
		d, err := os.MkdirTemp("", "courier-chaos-")
		if err != nil {
			return fmt.Errorf("chaos: run directory: %w", err)
		}
		r.dir = d
	} else if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return fmt.Errorf("chaos: run directory: %w", err)
	}
	if r.cfg.Store == "postgres" {
		if _, err := os.Stat(filepath.Join(r.dir, "postgres")); err == nil {
			return fmt.Errorf("chaos: %s exists: a run needs a fresh database", filepath.Join(r.dir, "postgres"))
		}
		return nil
	}
	r.dbPath = filepath.Join(r.dir, "courier.db")
	if _, err := os.Stat(r.dbPath); err == nil {
		return fmt.Errorf("chaos: %s exists: a run needs a fresh database", r.dbPath)
	}
	return nil
}

func (r *run) execute(ctx context.Context) (*Report, error) {
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	// The processes are kept alive (restarted after kills) from here on.
	keepCtx, stopKeeping := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer bg.Wait()
	defer stopKeeping()
	bg.Go(func() { r.keep(keepCtx) })
	sendCtx, stopSending := context.WithCancel(ctx)
	defer stopSending()
	bg.Go(func() { r.sender.dispatch(sendCtx) })

	if err := r.handshake(ctx); err != nil {
		return nil, err
	}

	// The write phase, with chaos.
	r.bh.blackHole()
	if r.conv != nil {
		for _, h := range r.hosts {
			h.calm.Store(false)
		}
	}
	r.logger.Info("write phase", "duration", r.cfg.Duration, "bus", r.cfg.Bus, "store", r.cfg.Store, "seed", r.cfg.Seed, "black_hole", r.bh.hostport)
	phase, endPhase := context.WithTimeout(ctx, r.cfg.Duration)
	var load sync.WaitGroup
	if r.conv != nil {
		// The phase ends when every story is written.
		load.Go(func() {
			r.conv.run(phase)
			endPhase()
		})
	} else {
		load.Go(func() { r.writer.run(phase, r.cfg.WriteRate) })
	}
	load.Go(func() { r.inbound(phase) })
	load.Go(func() { r.chaos(phase) })
	load.Wait()
	endPhase()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("chaos: write phase: %w", err)
	}

	// Everything up again, then wait for courier to settle.
	if err := r.restore(ctx); err != nil {
		return nil, err
	}
	rep, err := r.settle(ctx)
	if rep != nil {
		r.fillChaos(rep)
	}
	return rep, err
}

// setup starts the broker, the remote hosts and courier, and creates the
// local actors.
func (r *run) setup(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, r.cfg.SetupTimeout)
	defer cancel()
	var natsURL string
	if r.cfg.Bus == "nats" {
		r.broker = newBroker(filepath.Join(r.dir, "nats"))
		if err := r.broker.start(); err != nil {
			return fmt.Errorf("%w: %w", ErrSetup, err)
		}
		natsURL = r.broker.url()
	}
	if r.cfg.Store == "postgres" {
		if err := r.setupPostgres(sctx); err != nil {
			return fmt.Errorf("%w: %w", ErrSetup, err)
		}
		r.dbPath = r.pg.runDSN
	}
	port, err := freePort()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	r.listen = "127.0.0.1:" + strconv.Itoa(port)
	r.base = "http://" + r.listen

	kinds := []struct {
		name string
		b    Behaviour
	}{{"healthy_a", Healthy}, {"healthy_b", Healthy}, {"flapping", Flapping}, {"slow", Slow}, {"blackhole", BlackHole}}
	refuseMax := 0
	if r.cfg.Converge {
		// A host fails one activity at most twice (outages aside), so
		// that no delivery's backoff grows past a few seconds.
		refuseMax = 2
		// No black hole: its deliveries are lost by design. Chaotic
		// hosts instead, whose outages end.
		kinds = kinds[:4]
		for i := range r.cfg.ChaoticHosts {
			kinds = append(kinds, struct {
				name string
				b    Behaviour
			}{fmt.Sprintf("chaotic%d", i), Chaotic})
		}
		r.bh = &remoteHost{behaviour: BlackHole, hostport: "none"}
	}
	for i, k := range kinds {
		o := hostOptions{
			name: k.name, behaviour: k.b, actors: r.cfg.ActorsPerHost,
			rec: r.rec, keys: r.keys, logger: r.logger, seed: r.cfg.Seed + uint64(i) + 1,
			failRate: 0.25, lateFail: 0.05, refuseMax: refuseMax,
			slowMin: 200 * time.Millisecond, slowMax: 2 * time.Second,
		}
		if r.cfg.Converge {
			// Every failure makes courier hold back the whole host for
			// a backoff: at the stream's volume, the rates above would
			// stretch the run far more than they test.
			o.failRate, o.lateFail = r.cfg.FaultRate, r.cfg.FaultRate/5
			o.slowMin, o.slowMax = 10*time.Millisecond, 200*time.Millisecond
		}
		h, err := newRemoteHost(o)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrSetup, err)
		}
		if r.cfg.Converge {
			// Calm through set-up: the handshake's Accepts are not what
			// the run checks. The write phase lets the chaos loose.
			h.calm.Store(true)
		}
		r.hosts = append(r.hosts, h)
		r.logger.Info("remote host", "host", h.hostport, "behaviour", string(k.b), "actors", len(h.actors))
		if k.b == BlackHole {
			r.bh = h
		}
	}
	r.world = newWorld(r.cfg.Bus, r.bh.hostport)

	for i := range r.cfg.LocalActors {
		a, err := r.createActor(sctx, fmt.Sprintf("local%d", i))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrSetup, err)
		}
		r.locals = append(r.locals, a)
	}

	if err := r.startCourier(natsURL); err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	if err := r.waitReady(sctx); err != nil {
		return fmt.Errorf("%w: %w (see the server logs in %s)", ErrSetup, err, r.dir)
	}
	// Remote inboxes learn courier's keys now, as a peer's cache would
	// hold them, so that verifying a delivery never depends on the server
	// being up at that moment.
	for _, a := range r.locals {
		if _, err := r.keys.get(sctx, activitypub.KeyID(a.id)); err != nil {
			return fmt.Errorf("%w: %w", ErrSetup, err)
		}
	}
	r.writer = newWriter(r.base, r.locals, r.cfg.Seed, r.logger)
	r.sender = newSender(r.cfg.Seed, r.logger)
	if r.cfg.Converge {
		var remotes []*remoteActor
		for _, h := range r.hosts {
			remotes = append(remotes, h.actors...)
		}
		r.conv = newConverger(r.base, r.locals, remotes, r.cfg.Objects, r.cfg.Seed, r.sender.ackedNote, r.logger)
	}
	return nil
}

// startCourier starts the server and worker processes, and the front
// before several servers.
func (r *run) startCourier(natsURL string) error {
	common := []string{"--base-url", r.base, "--bus", r.cfg.Bus,
		"--park-max", r.cfg.ParkMax.String(), "--allow-private-addresses"}
	if natsURL != "" {
		common = append(common, "--nats-url", natsURL)
	}
	if r.cfg.MaxAttempts > 0 {
		common = append(common, "--max-attempts", strconv.Itoa(r.cfg.MaxAttempts))
	}
	env := append(append([]string(nil), DefaultChildEnv...), r.cfg.ChildEnv...)
	name := func(kind string, i, n int) string {
		if n == 1 {
			return kind
		}
		return kind + strconv.Itoa(i+1)
	}
	// Every process serves its operators' endpoints on a port of its own,
	// so that runs side by side never clash.
	var listens []string
	for i := range r.cfg.Servers {
		ops, err := freePort()
		if err != nil {
			return err
		}
		listen := r.listen
		if r.cfg.Servers > 1 {
			p, err := freePort()
			if err != nil {
				return err
			}
			listen = "127.0.0.1:" + strconv.Itoa(p)
		}
		listens = append(listens, listen)
		r.ops = append(r.ops, "http://127.0.0.1:"+strconv.Itoa(ops))
		n := name("server", i, r.cfg.Servers)
		args := append([]string{"serve", "--worker=false", "--listen", listen, "--ops-listen", "127.0.0.1:" + strconv.Itoa(ops), "--db", r.dbPath}, common...)
		c, err := newChild(n, r.cfg.Executable, args, env, filepath.Join(r.dir, n+".log"), r.logger)
		if err != nil {
			return err
		}
		r.servers = append(r.servers, c)
	}
	for i := range r.cfg.Workers {
		ops, err := freePort()
		if err != nil {
			return err
		}
		db := r.dbPath
		if r.pg != nil {
			db = r.pg.workerDSNs[i]
		}
		n := name("worker", i, r.cfg.Workers)
		args := append([]string{"worker", "--ops-listen", "127.0.0.1:" + strconv.Itoa(ops), "--db", db}, common...)
		c, err := newChild(n, r.cfg.Executable, args, env, filepath.Join(r.dir, n+".log"), r.logger)
		if err != nil {
			return err
		}
		r.workers = append(r.workers, c)
	}
	if r.cfg.Servers > 1 {
		f, err := newFront(r.listen, listens, r.logger)
		if err != nil {
			return err
		}
		r.front = f
	}
	now := time.Now()
	for _, c := range r.children() {
		if err := c.keep(now); err != nil {
			return err
		}
	}
	return nil
}

// children are courier's processes, servers first.
func (r *run) children() []*child {
	return append(append([]*child(nil), r.servers...), r.workers...)
}

// handshake has every remote actor follow every local actor and waits for
// every Follow to be acknowledged and Accepted.
func (r *run) handshake(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, r.cfg.SetupTimeout)
	defer cancel()
	var follows []*inboundActivity
	for _, h := range r.hosts {
		for _, ra := range h.actors {
			for _, la := range r.locals {
				f := newFollow(ra, la)
				follows = append(follows, f)
				r.sender.add(f, 0)
			}
		}
	}
	r.logger.Info("following", "follows", len(follows))
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		accepted := map[string]bool{}
		for _, p := range r.rec.snapshot() {
			if p.typ == "Accept" {
				accepted[p.objectID] = true
			}
		}
		items, _ := r.sender.snapshot()
		acked, refused := map[string]bool{}, 0
		for _, a := range items {
			if a.typ == "Follow" && a.acked {
				acked[a.id] = true
			}
			if a.typ == "Follow" && a.refused != 0 {
				refused++
			}
		}
		done := 0
		for _, f := range follows {
			if acked[f.id] && accepted[f.id] {
				done++
			}
		}
		if refused > 0 {
			return fmt.Errorf("%w: courier refused %d Follows (see the log above and %s)", ErrSetup, refused, r.dir)
		}
		if done == len(follows) {
			for _, f := range follows {
				r.world.addFollow(follow{id: f.id, host: f.from.host.hostport, local: f.objectID})
			}
			r.logger.Info("followed", "follows", done)
			return nil
		}
		select {
		case <-sctx.Done():
			return fmt.Errorf("%w: %d of %d follows acknowledged and accepted within %s (see %s)",
				ErrSetup, done, len(follows), r.cfg.SetupTimeout, r.dir)
		case <-t.C:
		}
	}
}

// inbound produces remote activities for courier's inboxes at the
// configured rate until ctx ends: Creates of notes mentioning a local
// actor, and Likes of notes courier acknowledged.
func (r *run) inbound(ctx context.Context) {
	var senders []*remoteActor
	for _, h := range r.hosts {
		if h != r.bh {
			senders = append(senders, h.actors...)
		}
	}
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 3))
	t := time.NewTicker(time.Duration(float64(time.Second) / r.cfg.InboundRate))
	defer t.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n++
		from := senders[rng.IntN(len(senders))]
		if rng.Float64() < 0.4 {
			if nt, ok := r.writer.randomNote(rng); ok && r.sender.tryLike(from.id, nt.id) {
				r.sender.add(newLike(from, nt), resendShare)
				continue
			}
		}
		to := r.locals[rng.IntN(len(r.locals))]
		r.sender.add(newCreate(from, to, r.base+"/inbox", rng.IntN(2) == 0, n, time.Now()), resendShare)
	}
}

// chaos kills and restarts until ctx ends.
func (r *run) chaos(ctx context.Context) {
	next := func(mean time.Duration) time.Time {
		return time.Now().Add(time.Duration(float64(mean) * (0.5 + r.rng.Float64())))
	}
	nextWorker := next(r.cfg.WorkerKillEvery)
	nextServer := next(r.cfg.ServerRestartEvery)
	nextBroker := next(r.cfg.BrokerOutageEvery)
	nextPG := next(r.cfg.PGRestartEvery)
	nextCut := next(r.cfg.DBCutEvery)
	nextOutage := next(r.cfg.OutageEvery / 4) // the first one early: a short run has one too
	var chaotic []*remoteHost
	for _, h := range r.hosts {
		if h.behaviour == Chaotic {
			chaotic = append(chaotic, h)
		}
	}
	var brokerBack time.Time
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		if now.After(nextWorker) {
			w := r.workers[r.rng.IntN(len(r.workers))]
			w.kill(syscall.SIGKILL, randBetween(r.rng, 200*time.Millisecond, 2*time.Second))
			r.logger.Info("worker killed", "worker", w.name, "signal", signalName(syscall.SIGKILL))
			nextWorker = next(r.cfg.WorkerKillEvery)
		}
		if now.After(nextServer) {
			sig := syscall.SIGKILL
			if r.rng.Float64() < 0.3 {
				sig = syscall.SIGTERM
			}
			s := r.servers[r.rng.IntN(len(r.servers))]
			s.kill(sig, randBetween(r.rng, 200*time.Millisecond, 2*time.Second))
			r.logger.Info("server restarted", "server", s.name, "signal", signalName(sig))
			nextServer = next(r.cfg.ServerRestartEvery)
		}
		if len(chaotic) > 0 && now.After(nextOutage) {
			// Longer than courier's wait before it finds a host still
			// failing unavailable (8 s in DefaultChildEnv), when
			// OutageMax allows; it parks the host's deliveries when the
			// outage also outlasts its backoff of the host.
			h := chaotic[r.rng.IntN(len(chaotic))]
			d := randBetween(r.rng, min(11*time.Second, r.cfg.OutageMax*3/4), r.cfg.OutageMax)
			h.hangFor(now, d)
			r.outages++
			r.logger.Info("host outage", "host", h.hostport, "for", d.Round(time.Millisecond))
			nextOutage = next(r.cfg.OutageEvery)
		}
		if r.pg != nil {
			nextPG, nextCut = r.pgChaos(now, nextPG, nextCut, next)
		}
		if r.broker == nil {
			continue
		}
		if !brokerBack.IsZero() && now.After(brokerBack) {
			if err := r.broker.start(); err != nil {
				r.logger.Warn("broker restart", "err", err)
				continue // try again on the next tick
			}
			r.logger.Info("broker back")
			brokerBack = time.Time{}
			nextBroker = next(r.cfg.BrokerOutageEvery)
		}
		if brokerBack.IsZero() && now.After(nextBroker) {
			r.broker.stop()
			r.brokerStops++
			brokerBack = now.Add(randBetween(r.rng, r.cfg.BrokerOutageMax/4, r.cfg.BrokerOutageMax))
			r.logger.Info("broker stopped", "until", brokerBack.Format(time.TimeOnly))
		}
	}
}

// keep restarts courier's processes whenever they are down and their
// pause is over, until ctx ends.
func (r *run) keep(ctx context.Context) {
	t := time.NewTicker(keepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		for _, c := range r.children() {
			if err := c.keep(now); err != nil {
				r.logger.Warn("restart", "err", err)
			}
		}
	}
}

// restore brings everything back after the write phase: the broker up,
// both processes started without further pause, the server ready, the
// flapping hosts calm.
func (r *run) restore(ctx context.Context) error {
	// The remote world calms down with courier's: a flapping host answers
	// every POST from now on. Had it gone on refusing a share of them, an
	// event refused six times in a row (0.3 to the sixth, once in a
	// thousand or so) would wait past the settle timeout for its next
	// attempt, courier's backoff having doubled each time; the run would
	// fail by chance, with nothing lost.
	for _, h := range r.hosts {
		h.calm.Store(true)
		h.hungUntil.Store(0)
	}
	if r.broker != nil && !r.broker.running() {
		if err := r.broker.start(); err != nil {
			return fmt.Errorf("chaos: restore: %w", err)
		}
	}
	if r.pg != nil {
		if err := r.pgRestore(); err != nil {
			return fmt.Errorf("chaos: restore: %w", err)
		}
	}
	for _, c := range r.children() {
		c.release()
		if err := c.keep(time.Now()); err != nil {
			return fmt.Errorf("chaos: restore: %w", err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := r.waitReady(rctx); err != nil {
		return fmt.Errorf("chaos: restore: %w", err)
	}
	return nil
}

// settle waits until courier has done everything it can: every expected
// pair delivered (or dead-lettered: then it is lost for good), every
// inbound activity imported, no outbox row pending or processing other than
// the black-holed host's, and the remote inboxes quiet. It then gives the
// black-holed host's deliveries a bounded while (--park-max and a grace) to
// be dead-lettered. It returns the report of the last look, quiescent or not.
func (r *run) settle(ctx context.Context) (*Report, error) {
	sctx, cancel := context.WithTimeout(ctx, r.cfg.SettleTimeout)
	defer cancel()
	db, err := openReadOnly(r.dbPath)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	t := time.NewTicker(settleInterval)
	defer t.Stop()
	r.logger.Info("settling", "timeout", r.cfg.SettleTimeout)
	settleStart := time.Now()
	var last *Report
	for {
		o, err := r.look(sctx, db)
		switch {
		case err == nil:
			last = &o.report
			quiet := time.Since(r.rec.lastActivity()) >= quietFor
			if o.outstanding == 0 && quiet && r.sender.pending() == 0 {
				// Parked deliveries of the black-holed host count as
				// settled, but the run gives them a bounded while to reach
				// --park-max, so that dead-lettering is shown too.
				if last.BlackHoleParked+last.BlackHoleOther == 0 || time.Since(settleStart) > r.cfg.ParkMax+parkGrace {
					last.Quiescent = true
					return last, nil
				}
			}
			args := []any{"outstanding", o.outstanding, "undelivered", last.PairsLost,
				"inbound_pending", r.sender.pending(), "black_hole_waiting", last.BlackHoleParked + last.BlackHoleOther, "quiet", quiet}
			if last.Converge {
				args = append(args, "view_divergences", last.ViewDivergences)
			}
			r.logger.Info("not settled yet", args...)
		case sctx.Err() == nil:
			r.logger.Warn("read database", "err", err)
		}
		select {
		case <-sctx.Done():
			if ctx.Err() != nil && last == nil {
				return nil, fmt.Errorf("chaos: settle: %w", ctx.Err())
			}
			if last == nil {
				// One last look with a fresh bound, so the report exists.
				fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer fcancel()
				o, err := r.look(fctx, db)
				if err != nil {
					return nil, err
				}
				last = &o.report
			}
			return last, nil
		case <-t.C:
		}
	}
}

// look reads the database and the records once and evaluates them.
func (r *run) look(ctx context.Context, db *checkDB) (outcome, error) {
	s, err := read(ctx, db, r.bh.hostport)
	if err != nil {
		return outcome{}, err
	}
	items, dups := r.sender.snapshot()
	posts := r.rec.snapshot()
	o := evaluate(r.world, s, posts, r.writer.stats(), items, dups)
	o.report.Seed = r.cfg.Seed
	o.report.Store = r.cfg.Store
	o.report.BadSignatures = r.rec.badSignatures.Load()
	if r.conv != nil {
		var hosts []string
		for _, h := range r.hosts {
			hosts = append(hosts, h.hostport)
		}
		want, err := readExpected(ctx, db, r.world, hosts)
		if err != nil {
			return outcome{}, err
		}
		c := checkConvergence(want, arrivalsOf(posts))
		o.report.fillConvergence(c, r.conv.snapshot())
		o.report.Outages = r.outages
		// A view that differs may still be on its way: the run waits
		// for it as for an undelivered pair, bounded by the settle
		// timeout.
		o.outstanding += c.ViewDivergences
	}
	return o, nil
}

func (r *run) fillChaos(rep *Report) {
	for _, c := range r.workers {
		s := c.stats()
		rep.WorkerKills += s.SIGKILLs
		rep.SelfExits += s.Unexpected
	}
	for _, c := range r.servers {
		s := c.stats()
		rep.ServerKills += s.SIGKILLs
		rep.ServerTerms += s.SIGTERMs
		rep.SelfExits += s.Unexpected
	}
	rep.BrokerStops = r.brokerStops
	rep.Servers, rep.Workers = len(r.servers), len(r.workers)
	if r.pg != nil {
		rep.PGRestarts, rep.DBCuts, rep.CutMethod = r.pg.restarts, r.pg.cuts, r.pg.method
	}
}

// shutdown stops courier's processes, the broker and the remote hosts.
func (r *run) shutdown() {
	var wg sync.WaitGroup
	for _, c := range r.children() {
		wg.Go(func() {
			c.stop(stopGrace)
			c.closeLog()
		})
	}
	wg.Wait()
	if r.front != nil {
		r.front.close()
	}
	if r.broker != nil {
		r.broker.stop()
	}
	if r.pg != nil {
		r.pg.close()
	}
	for _, h := range r.hosts {
		h.close()
	}
}

// createActor runs `courier actor create NAME --json` on the run's database.
func (r *run) createActor(ctx context.Context, name string) (*localActor, error) {
	cctx, cancel := context.WithTimeout(ctx, actorCreateMax)
	defer cancel()
	cmd := exec.CommandContext(cctx, r.cfg.Executable, "actor", "create", "--db", r.dbPath, "--base-url", r.base, name, "--json")
	cmd.Env = os.Environ()
	cmd.SysProcAttr = procAttr()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("chaos: courier actor create %s: %w: %s", name, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var out struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out); err != nil || out.ID == "" || out.Token == "" {
		return nil, fmt.Errorf("chaos: courier actor create %s: unexpected output %q", name, stdout.String())
	}
	return &localActor{name: name, id: out.ID, token: out.Token, inbox: out.ID + "/inbox"}, nil
}

// waitReady polls every server's /readyz (on its operators' listener)
// until each has answered 200 or ctx ends.
func (r *run) waitReady(ctx context.Context) error {
	for _, ops := range r.ops {
		if err := waitReady(ctx, ops); err != nil {
			return err
		}
	}
	return nil
}

func waitReady(ctx context.Context, ops string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, ops+"/readyz", nil)
		if err != nil {
			return fmt.Errorf("chaos: readiness: %w", err)
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: server at %s not ready: %w", ops, ctx.Err())
		case <-t.C:
		}
	}
}

// freePort returns a loopback port that was free a moment ago. The server
// must keep one port across restarts (it is in every id), so the run picks
// it once.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("chaos: pick a port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}
