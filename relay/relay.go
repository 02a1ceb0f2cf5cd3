// Package relay subscribes the instance to ActivityPub relays (FEP-ae0c)
// and talks to them: it POSTs the instance actor's Follow, Undo and Accept
// to relays (EventRelaySend events the store enqueues with the relay's
// row), and delivers local public activities to the accepted
// Mastodon-style relays as well. What relays send is imported by the
// inbox (answers to the Follow, a LitePub relay's Follow, its Announces).
package relay

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
)

// Handler names.
const (
	// HandlerSend POSTs an EventRelaySend.
	HandlerSend = "relay_send"
	// HandlerFanout enqueues a local public activity for each accepted
	// Mastodon-style relay.
	HandlerFanout = "relay_fanout"
)

// relayedTypes are the activities a Mastodon-style relay takes.
var relayedTypes = map[string]bool{"Create": true, "Update": true, "Delete": true, "Announce": true, "Undo": true}

// ActorResolver resolves a relay actor's inbox; *activitypub.Resolver
// implements it.
type ActorResolver interface {
	Actor(ctx context.Context, id string) (*activitypub.Actor, error)
}

// Config configures a Service.
type Config struct {
	// Store holds the relays, the local actors and their keys. Required.
	Store *store.Store
	// Resolver resolves a LitePub relay actor's inbox. Required.
	Resolver ActorResolver
	// Client POSTs. Default activitypub.NewClient(ClientOptions{}), which
	// refuses private addresses.
	Client *http.Client
	// MaxRetryAfter clamps a relay's Retry-After. Default 1 h.
	MaxRetryAfter time.Duration
	// Logger receives the logs (nil discards).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Client == nil {
		c.Client = activitypub.NewClient(activitypub.ClientOptions{})
	}
	if c.MaxRetryAfter <= 0 {
		c.MaxRetryAfter = time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Service runs the relay handlers. It is safe for concurrent use.
type Service struct {
	cfg Config
	st  *store.Store
	log *slog.Logger
}

// New returns a Service for cfg.
func New(cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	if cfg.Store == nil || cfg.Resolver == nil {
		return nil, errors.New("relay: Config.Store and Config.Resolver are required")
	}
	return &Service{cfg: cfg, st: cfg.Store, log: cfg.Logger}, nil
}

// Register registers HandlerSend for store.EventRelaySend and
// HandlerFanout for activitypub.EventOutgoing on reg.
func (s *Service) Register(reg *outbox.Registry) {
	reg.Handle(store.EventRelaySend, HandlerSend, s.send)
	reg.Handle(activitypub.EventOutgoing, HandlerFanout, s.fanout)
}

// fanout enqueues a local public activity of a type relays take for each
// accepted Mastodon-style relay, signed by its actor, in one transaction.
func (s *Service) fanout(ctx context.Context, ev outbox.Event) error {
	var out activitypub.Outgoing
	if err := json.Unmarshal(ev.Payload, &out); err != nil || len(out.Activity) == 0 {
		return outbox.Permanent(fmt.Errorf("relay: fan-out %s: bad payload", ev.ID))
	}
	act, err := activitypub.ParseActivity(out.Activity)
	if err != nil {
		return outbox.Permanent(fmt.Errorf("relay: fan-out %s: %w", ev.ID, err))
	}
	public := slices.ContainsFunc(act.To, activitypub.IsPublic) || slices.ContainsFunc(act.Cc, activitypub.IsPublic)
	if !public || !relayedTypes[act.Type] || act.Actor != out.Actor || !s.st.URIs().IsLocal(out.Actor) {
		return nil
	}
	inboxes, err := s.st.RelayInboxes(ctx)
	if err != nil || len(inboxes) == 0 {
		return err
	}
	return s.st.Tx(ctx, func(tx *sql.Tx) error {
		for _, inbox := range inboxes {
			if err := s.st.EnqueueRelaySendTx(ctx, tx, outbox.ChildID(ev.ID, "relay "+inbox), ev.OccurredAt,
				store.RelaySend{Actor: out.Actor, Inbox: inbox, Activity: out.Activity}); err != nil {
				return err
			}
		}
		return nil
	})
}

// send POSTs an EventRelaySend, signed by its actor's key, and classifies
// the answer as delivery does: delivered, retried (an error: the event's
// backoff), or permanent.
func (s *Service) send(ctx context.Context, ev outbox.Event) error {
	var p store.RelaySend
	if err := json.Unmarshal(ev.Payload, &p); err != nil || p.Actor == "" || len(p.Activity) == 0 || (p.Inbox == "" && p.To == "") {
		return outbox.Permanent(fmt.Errorf("relay: send %s: bad payload", ev.ID))
	}
	signer, err := s.signer(ctx, p.Actor)
	if err != nil {
		return err
	}
	inbox := p.Inbox
	if inbox == "" {
		a, err := s.cfg.Resolver.Actor(ctx, p.To)
		if err != nil {
			if errors.Is(err, activitypub.ErrGone) || errors.Is(err, activitypub.ErrNotFound) {
				return outbox.Permanent(fmt.Errorf("relay: send %s: %w", ev.ID, err))
			}
			return fmt.Errorf("relay: send %s: resolve %s: %w", ev.ID, p.To, err)
		}
		inbox = a.InboxFor()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, inbox, bytes.NewReader(p.Activity))
	if err != nil {
		return outbox.Permanent(fmt.Errorf("relay: send %s: %w", ev.ID, err))
	}
	req.Header.Set("Content-Type", activitypub.ContentType)
	now := s.cfg.Now()
	if err := signer.Sign(req, p.Activity, now); err != nil {
		return outbox.Permanent(fmt.Errorf("relay: send %s: %w", ev.ID, err))
	}
	status := 0
	var header http.Header
	resp, postErr := s.cfg.Client.Do(req)
	if postErr == nil {
		status, header = resp.StatusCode, resp.Header
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
	}
	d := delivery.Classify(status, header, postErr, now, s.cfg.MaxRetryAfter)
	s.log.DebugContext(ctx, "relay: sent", "event_id", ev.ID, "inbox", activitypub.RedactURL(inbox), "status", status, "verdict", d.Reason)
	switch d.Verdict {
	case delivery.Delivered:
		return nil
	case delivery.Permanent:
		return outbox.Permanent(fmt.Errorf("relay: send %s to %s: %s", ev.ID, inbox, d.Reason))
	}
	return fmt.Errorf("relay: send %s to %s: %s", ev.ID, inbox, d.Reason)
}

// signer returns the key of actor: the instance actor's, or a local
// actor's.
func (s *Service) signer(ctx context.Context, actor string) (activitypub.Signer, error) {
	if actor == s.st.URIs().InstanceActor() {
		inst, err := s.st.InstanceActor(ctx)
		if err != nil {
			return activitypub.Signer{}, fmt.Errorf("relay: instance key: %w", err)
		}
		return inst.Signer(), nil
	}
	a, err := s.st.ActorByURI(ctx, actor)
	if errors.Is(err, store.ErrNotFound) {
		return activitypub.Signer{}, outbox.Permanent(fmt.Errorf("relay: %s is not a local actor", actor))
	}
	if err != nil {
		return activitypub.Signer{}, fmt.Errorf("relay: load %s: %w", actor, err)
	}
	key, err := activitypub.ParsePrivateKeyPEM(a.PrivateKeyPEM)
	if err != nil {
		return activitypub.Signer{}, outbox.Permanent(fmt.Errorf("relay: key of %s: %w", actor, err))
	}
	return activitypub.Signer{KeyID: activitypub.KeyID(a.URI), Key: key}, nil
}
