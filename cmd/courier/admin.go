package main

import (
	"context"
	"io"
	"time"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/admin"
	"github.com/courier-ap/courier/console"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/store"
)

// registerOps mounts the admin API and the console on the operators'
// router; without an admin token every /admin/ and /console/ path answers
// that they are disabled.
func (a *app) registerOps(r *mux.Router) error {
	ds := admin.NewDeliveryState(a.delivery, a.queue)
	cfg := admin.Config{
		Token:      a.cfg.AdminToken,
		Queue:      a.queue,
		Store:      a.store,
		Hosts:      ds,
		Deliveries: ds,
		Relays:     a.store,
		Webhooks:   a.webhooks,
		Signatures: a.delivery.Schemes(),
		Processes:  a.delivery,
		Rates:      admin.NewDeliveryRates(a.db.Read),
		Lease:      a.cfg.Lease,
		Logger:     a.logger,

		AllowPrivateAddresses: a.cfg.AllowPrivateAddresses,
		Failures:              a.failures,
	}
	if a.inbox != nil {
		cfg.Inbound = inboundView{h: a.inbox, st: a.store, requests: float64(a.cfg.InboxHostRequests), bytes: float64(a.cfg.InboxHostBytes)}
	}
	if a.cfg.Bus == "nats" && a.cfg.NATSMode == "jetstream" {
		cfg.JetStream = admin.NewJetStream(a.db.Read, a.db.Write, nil)
	}
	api, err := admin.New(cfg)
	if err != nil {
		return err
	}
	api.Register(r)
	con, err := console.New(console.Config{Admin: api, Enabled: api.Enabled(), Logger: a.logger})
	if err != nil {
		return err
	}
	con.Register(r)
	return nil
}

// inboundView shows the inbox's per-host budgets in the admin API.
type inboundView struct {
	h               *inbox.Handler
	st              *store.Store
	requests, bytes float64
}

// InboundTombstones adds the remote tombstones (the inbox's defaults:
// cmd sets neither bound nor retention) to the view.
func (v inboundView) InboundTombstones(ctx context.Context) (admin.InboundTombstones, error) {
	st, err := v.st.RemoteTombstoneStats(ctx)
	if err != nil {
		return admin.InboundTombstones{}, err
	}
	return admin.InboundTombstones{Held: st.Held, Refused: st.Refused, Limit: inbox.DefaultTombstoneLimit,
		RetentionSeconds: int64(inbox.DefaultTombstoneRetention / time.Second), Outcome: inbox.OutcomeTombstoned}, nil
}

func (v inboundView) InboundHosts() admin.InboundHosts {
	return admin.InboundHosts{RequestsPerMinute: v.requests, BytesPerMinute: v.bytes, Hosts: v.h.HostBudgets()}
}

// adminCommand runs `courier admin ...` against a running server's admin API.
func adminCommand(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if code := admin.Command(ctx, args, stdout, stderr, getenv); code != 0 {
		return &exitError{code: code, err: errReported}
	}
	return nil
}
