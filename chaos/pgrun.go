package chaos

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// pgRun is the PostgreSQL side of a run: the server (the run's own, or
// one named by a URL), the database, and how each worker is cut off.
type pgRun struct {
	cluster *pgCluster  // nil with Config.PostgresURL
	ns      *netns      // nil unless the cut is netns
	proxies []*cutProxy // one per worker with the proxy cut
	method  string      // "netns" or "proxy"

	runDSN     string   // the run, the actor creation and the servers
	workerDSNs []string // one per worker, through its link or proxy

	restarts, cuts int
	cutWorker      int       // -1 when no worker is cut off
	cutUntil       time.Time // when the current cut ends
	downUntil      time.Time // zero while the server is up
}

// setupPostgres makes the database every process shares and the links
// the workers reach it by.
func (r *run) setupPostgres(ctx context.Context) error {
	p := &pgRun{cutWorker: -1}
	r.pg = p
	name := fmt.Sprintf("courier_chaos_%d", os.Getpid())
	if r.cfg.PostgresURL != "" {
		name += "_" + strconv.FormatInt(time.Now().Unix(), 10)
		u, err := url.Parse(r.cfg.PostgresURL)
		if err != nil {
			return fmt.Errorf("chaos: postgres URL: %w", err)
		}
		if err := pgCreateDatabase(ctx, r.cfg.PostgresURL, name); err != nil {
			return err
		}
		u.Path = "/" + name
		r.logger.Info("postgres", "database", name, "cut", "proxy", "restarts", "none (not the run's server)")
		return p.links(u, r.cfg.Workers)
	}

	method := r.cfg.Cut
	if method == "" || method == "netns" {
		ns, err := newNetns(1 + r.cfg.Workers)
		switch {
		case err == nil:
			p.ns, method = ns, "netns"
		case method == "netns":
			return err
		default:
			r.logger.Info("no network namespace: workers are cut off through TCP proxies", "reason", err)
			method = "proxy"
		}
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	// The server's user must reach its directory inside the run's.
	if err := os.Chmod(r.dir, 0o711); err != nil {
		return fmt.Errorf("chaos: run directory: %w", err)
	}
	c, err := newPGCluster(filepath.Join(r.dir, "postgres"), port, p.ns, r.logger)
	if err != nil {
		return err
	}
	p.cluster = c
	host := "127.0.0.1"
	if p.ns != nil {
		host = p.ns.addr(0)
	}
	if err := c.start(host); err != nil {
		return err
	}
	if err := c.createDatabase(ctx, host, pgDatabase); err != nil {
		return err
	}
	u, err := url.Parse(c.dsn(host, pgDatabase))
	if err != nil {
		return fmt.Errorf("chaos: postgres: %w", err)
	}
	if method == "netns" {
		p.method = "netns"
		p.runDSN = u.String()
		for i := range r.cfg.Workers {
			p.workerDSNs = append(p.workerDSNs, c.dsn(p.ns.addr(1+i), pgDatabase))
		}
		r.logger.Info("postgres", "dir", c.dir, "port", port, "netns", p.ns.name, "cut", "netns")
		return nil
	}
	r.logger.Info("postgres", "dir", c.dir, "port", port, "cut", "proxy")
	return p.links(u, r.cfg.Workers)
}

// links sets the run's DSN to u and puts a cut proxy in front of u for
// each worker.
func (p *pgRun) links(u *url.URL, workers int) error {
	p.method = "proxy"
	p.runDSN = u.String()
	for range workers {
		px, err := newCutProxy(u.Host)
		if err != nil {
			return err
		}
		p.proxies = append(p.proxies, px)
		w := *u
		w.Host = px.addr()
		p.workerDSNs = append(p.workerDSNs, w.String())
	}
	return nil
}

// restartable reports whether the run can restart the server.
func (p *pgRun) restartable() bool { return p.cluster != nil }

// probeHost is the address the run reaches its own server at.
func (p *pgRun) probeHost() string {
	if p.ns != nil {
		return p.ns.addr(0)
	}
	return "127.0.0.1"
}

// stopServer shuts the server down: a fast shutdown (open transactions
// rolled back, clients disconnected) or, with immediate, a crash-like stop
// that leaves recovery to the next start.
func (p *pgRun) stopServer(immediate bool) {
	sig := syscall.SIGINT
	if immediate {
		sig = syscall.SIGQUIT
	}
	p.cluster.stop(sig)
	p.restarts++
}

// startServer starts the server again on its data and port.
func (p *pgRun) startServer() error { return p.cluster.start(p.probeHost()) }

// cut cuts worker i off from the server.
func (p *pgRun) cut(i int) error {
	if p.ns != nil {
		if err := p.ns.cut(1 + i); err != nil {
			return err
		}
	} else {
		p.proxies[i].cut()
	}
	p.cuts++
	return nil
}

// restore reconnects worker i.
func (p *pgRun) restore(i int) error {
	if p.ns != nil {
		return p.ns.restore(1 + i)
	}
	p.proxies[i].restore()
	return nil
}

// close stops the server, the proxies and the namespace, once courier's
// processes have exited.
func (p *pgRun) close() {
	for _, px := range p.proxies {
		px.close()
	}
	if p.cluster != nil {
		p.cluster.stop(syscall.SIGINT)
	}
	if p.ns != nil {
		p.ns.close()
	}
}

// pgChaos applies the PostgreSQL faults due at now and returns when the
// next ones are due: a restart of the server (down for a moment, then
// started on its data) and a cut of one worker from it for a while.
func (r *run) pgChaos(now, nextPG, nextCut time.Time, next func(time.Duration) time.Time) (time.Time, time.Time) {
	p := r.pg
	if p.restartable() {
		if !p.downUntil.IsZero() && now.After(p.downUntil) {
			if err := p.startServer(); err != nil {
				r.logger.Warn("postgres start", "err", err)
				return nextPG, nextCut // try again on the next tick
			}
			r.logger.Info("postgres back")
			p.downUntil = time.Time{}
			nextPG = next(r.cfg.PGRestartEvery)
		}
		if p.downUntil.IsZero() && now.After(nextPG) {
			immediate := r.rng.Float64() < 0.5
			p.stopServer(immediate)
			p.downUntil = time.Now().Add(randBetween(r.rng, 500*time.Millisecond, 3*time.Second))
			mode := "fast"
			if immediate {
				mode = "immediate"
			}
			r.logger.Info("postgres stopped", "mode", mode, "until", p.downUntil.Format(time.TimeOnly))
		}
	}
	if p.cutWorker >= 0 && now.After(p.cutUntil) {
		if err := p.restore(p.cutWorker); err != nil {
			r.logger.Warn("reconnect worker", "err", err)
			return nextPG, nextCut
		}
		r.logger.Info("worker reconnected to postgres", "worker", r.workers[p.cutWorker].name)
		p.cutWorker = -1
		nextCut = next(r.cfg.DBCutEvery)
	}
	if p.cutWorker < 0 && now.After(nextCut) {
		i := r.rng.IntN(len(r.workers))
		if err := p.cut(i); err != nil {
			r.logger.Warn("cut worker", "err", err)
			nextCut = next(r.cfg.DBCutEvery)
			return nextPG, nextCut
		}
		p.cutWorker = i
		p.cutUntil = time.Now().Add(randBetween(r.rng, r.cfg.DBCutMax/4, r.cfg.DBCutMax))
		r.logger.Info("worker cut off from postgres", "worker", r.workers[i].name, "by", p.method, "until", p.cutUntil.Format(time.TimeOnly))
	}
	return nextPG, nextCut
}

// pgRestore ends the PostgreSQL faults: the server up, no worker cut off.
func (r *run) pgRestore() error {
	p := r.pg
	if p.cluster != nil && !p.cluster.running() {
		if err := p.startServer(); err != nil {
			return err
		}
		p.downUntil = time.Time{}
	}
	if p.cutWorker >= 0 {
		if err := p.restore(p.cutWorker); err != nil {
			return err
		}
		p.cutWorker = -1
	}
	return nil
}
