package delivery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
)

// A Channel is a kind of delivery target other than a remote inbox, added
// by another package (package app/webhook's endpoints) through
// Config.Channels. Its events go through the machinery of a delivery: the
// health of their target, kept under the target's name as a host's is
// (parking, probes, the admin hosts API), its concurrency, flights,
// classification, attempt records and the outbox's retries, without the
// order per (object, inbox). Only their requests are the channel's.
type Channel interface {
	// Name names the channel in logs and in the attempt records of its
	// events (their activity id is Name:event id).
	Name() string
	// EventType is the outbox event type of its events, whose Target is
	// one of its targets.
	EventType() string
	// Handler is the name of their handler, their processed-events ledger
	// key: keep it stable.
	Handler() string
	// Owns reports whether target, an event's Target or a host of the
	// health table, is one of its targets. A channel's targets are never
	// the name of a remote host nor another channel's.
	Owns(target string) bool
	// Request returns the POST of ev at now and its body. An error
	// wrapping ErrTargetGone drops the event (its target is gone for
	// good); an outbox.Permanent error dead-letters it.
	Request(ctx context.Context, ev outbox.Event, now time.Time) (*http.Request, []byte, error)
	// Client returns the client that sends its requests, given the options
	// of the one delivery would build (its timeouts, per-host concurrency,
	// User-Agent and Config.AllowPrivate): activitypub.NewClient of them
	// with the channel's own address policy, or a client of its own; nil
	// is activitypub.NewClient(opts). Redirects are never followed. New
	// calls it once.
	Client(opts activitypub.ClientOptions) *http.Client
	// Attempted is told of each POST of its events (outcome, HTTP status,
	// duration), for its metrics: Config.Metrics counts remote inboxes'
	// POSTs only.
	Attempted(outcome string, status int, took time.Duration)
}

// channel is a registered Channel and the client of its requests.
type channel struct {
	Channel
	client *http.Client
}

// EventType is the type of the outbox events that go to target (an
// event's Target, a host of the health table): the EventType of the
// channel that owns it, EventPost for a remote host.
func (s *Service) EventType(target string) string {
	if c := s.channelOf(target); c != nil {
		return c.EventType()
	}
	return EventPost
}

// channelOf returns the channel that owns target, or nil.
func (s *Service) channelOf(target string) *channel {
	for _, c := range s.channels {
		if c.Owns(target) {
			return c
		}
	}
	return nil
}

// channelOfType returns the channel whose events are of type typ, or nil.
func (s *Service) channelOfType(typ string) *channel {
	for _, c := range s.channels {
		if c.EventType() == typ {
			return c
		}
	}
	return nil
}

// newChannels returns the channels of cfg with their clients, built from
// base, the options of the default delivery client.
func newChannels(cfg Config, base activitypub.ClientOptions) []*channel {
	out := make([]*channel, 0, len(cfg.Channels))
	for _, ch := range cfg.Channels {
		client := ch.Client(base)
		if client == nil {
			client = activitypub.NewClient(base)
		}
		c := *client
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		if c.Timeout == 0 {
			c.Timeout = cfg.Timeout
		}
		out = append(out, &channel{Channel: ch, client: &c})
	}
	return out
}

// validateChannels checks that each channel has its own event type and
// handler, none of them delivery's own.
func validateChannels(chs []Channel) error {
	types := map[string]bool{EventPost: true, activitypub.EventOutgoing: true, activitypub.EventForward: true}
	for _, ch := range chs {
		switch {
		case ch == nil:
			return errors.New("delivery: a nil channel")
		case ch.EventType() == "" || ch.Handler() == "" || ch.Name() == "":
			return fmt.Errorf("delivery: channel %q needs a name, an event type and a handler", ch.Name())
		case types[ch.EventType()]:
			return fmt.Errorf("delivery: channel %q: event type %q is taken", ch.Name(), ch.EventType())
		}
		types[ch.EventType()] = true
	}
	return nil
}

// deliverChannel handles an event of channel c: the same path as a
// delivery (health gate, slots, flight, classification, records), with
// the POST built by c and sent by its client. The event's Target is one of
// c's targets, its health kept as a host's.
func (s *Service) deliverChannel(ctx context.Context, c *channel, ev outbox.Event) error {
	target := ev.Target
	if target == "" {
		return outbox.Permanent(fmt.Errorf("%w: %s event %s has no target", ErrPayload, c.Name(), ev.ID))
	}
	p := Post{Inbox: target, ActivityID: c.Name() + ":" + ev.ID}
	err := s.post(ctx, ev, &p, target, func(ctx context.Context) (*prepared, error) {
		req, body, err := c.Request(ctx, ev, s.now())
		if err != nil {
			return nil, err
		}
		// What is recorded and logged of a target's URL leaves out the
		// credential it may carry.
		p.Inbox = activitypub.RedactURL(req.URL.String())
		return &prepared{req: req, body: body, client: c.client}, nil
	})
	if errors.Is(err, ErrTargetGone) {
		s.log.InfoContext(ctx, "delivery: event of a gone target dropped", "event_id", ev.ID, "channel", c.Name(), "host", target)
		return nil
	}
	return err
}
