package natsbus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Advisory subject roots the server publishes on (nats-server
// JSAdvisoryConsumerMaxDeliveryExceedPre and JSAdvisoryConsumerMsgTerminatedPre).
const (
	advisoryMaxDeliveries = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"
	advisoryTerminated    = "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED"
)

// errUnusable marks a stream or consumer that exists in a shape this build
// cannot use and must not change by itself: an operator has to act.
var errUnusable = errors.New("unusable")

// advisoryAckWait is the ack_wait of the advisory recorder's consumer:
// recording one advisory is a stream read and one insert.
const advisoryAckWait = 30 * time.Second

func (b *Bus) eventsSubjects() []string { return []string{b.cfg.SubjectPrefix + ".>"} }

func (b *Bus) advisorySubjects() []string {
	return []string{
		advisoryMaxDeliveries + "." + b.cfg.Stream + "." + b.cfg.Consumer,
		advisoryTerminated + "." + b.cfg.Stream + "." + b.cfg.Consumer,
	}
}

// eventsStream is the events stream this build creates when it is missing.
func (b *Bus) eventsStream() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        b.cfg.Stream,
		Description: "courier outbox events, relayed by the worker (Nats-Msg-Id = event id)",
		Subjects:    b.eventsSubjects(),
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardOld,
		MaxAge:      b.cfg.StreamMaxAge,
		Duplicates:  DuplicateWindow,
	}
}

// eventsConsumer is the durable pull consumer this build creates.
func (b *Bus) eventsConsumer() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       b.cfg.Consumer,
		Description:   "courier workers: runs the outbox handlers through the ledger",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       b.cfg.AckWait,
		MaxDeliver:    b.cfg.MaxAttempts,
		FilterSubject: b.cfg.SubjectPrefix + ".>",
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
	}
}

func (b *Bus) advisoryStream() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        b.cfg.AdvisoryStream,
		Description: "courier: max-deliveries and terminated advisories of " + b.cfg.Stream + " > " + b.cfg.Consumer,
		Subjects:    b.advisorySubjects(),
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardOld,
		MaxAge:      b.cfg.StreamMaxAge,
	}
}

func (b *Bus) advisoryConsumer() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       b.cfg.AdvisoryDurable,
		Description:   "courier workers: record exhausted events in jetstream_exhausted",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       advisoryAckWait,
		MaxDeliver:    -1,
	}
}

// reconcile makes sure the streams and consumers exist and carry what this
// build needs. Missing ones are created. Existing ones are compared with what
// this build needs and updated in place from a clone of their live config,
// changing only those fields, so operator-set and immutable fields stay; a
// refused update is logged with the manual command and does not stop the
// start. A consumer that cannot work at all (a push consumer, or one without
// explicit acks) is an error.
func (b *Bus) reconcile(ctx context.Context, js jetstream.JetStream) error {
	if err := b.reconcileStream(ctx, js, b.eventsStream(), b.fixEventsStream); err != nil {
		return err
	}
	if err := b.reconcileConsumer(ctx, js, b.cfg.Stream, b.eventsConsumer(), b.fixEventsConsumer); err != nil {
		return err
	}
	if err := b.reconcileStream(ctx, js, b.advisoryStream(), b.fixAdvisoryStream); err != nil {
		return err
	}
	return b.reconcileConsumer(ctx, js, b.cfg.AdvisoryStream, b.advisoryConsumer(), nil)
}

// fieldChange is one field of a live config that reconcile changes.
type fieldChange struct {
	field    string // the JSON name, as the nats CLI shows it
	from, to string
	flag     string // the nats CLI edit flag that sets it by hand
}

func (c fieldChange) String() string { return c.field + ": " + c.from + " -> " + c.to }

// streamFix changes a clone of a live stream config in place and reports
// what it changed. It must replace slices, never modify them.
type streamFix func(*jetstream.StreamConfig) []fieldChange

// consumerFix checks a clone of a live consumer config, changes it in place
// and reports what it changed, or an error when the consumer is unusable.
type consumerFix func(*jetstream.ConsumerConfig) ([]fieldChange, error)

func (b *Bus) fixEventsStream(c *jetstream.StreamConfig) []fieldChange {
	var ch []fieldChange
	if c.Duplicates != DuplicateWindow {
		ch = append(ch, fieldChange{"duplicate_window", c.Duplicates.String(), DuplicateWindow.String(),
			"--dupe-window " + DuplicateWindow.String()})
		c.Duplicates = DuplicateWindow
	}
	return append(ch, addSubjects(c, b.eventsSubjects())...)
}

func (b *Bus) fixAdvisoryStream(c *jetstream.StreamConfig) []fieldChange {
	return addSubjects(c, b.advisorySubjects())
}

// addSubjects adds the subjects a stream must capture and does not.
func addSubjects(c *jetstream.StreamConfig, need []string) []fieldChange {
	var missing []string
	for _, s := range need {
		if !slices.Contains(c.Subjects, s) {
			missing = append(missing, s)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	from := strings.Join(c.Subjects, ",")
	c.Subjects = append(slices.Clone(c.Subjects), missing...)
	to := strings.Join(c.Subjects, ",")
	return []fieldChange{{"subjects", from, to, "--subjects '" + to + "'"}}
}

func (b *Bus) fixEventsConsumer(c *jetstream.ConsumerConfig) ([]fieldChange, error) {
	if c.DeliverSubject != "" {
		return nil, fmt.Errorf("%w: consumer %s > %s is a push consumer (deliver subject %q); delete it or choose another consumer name",
			errUnusable, b.cfg.Stream, b.cfg.Consumer, c.DeliverSubject)
	}
	if c.AckPolicy != jetstream.AckExplicitPolicy {
		return nil, fmt.Errorf("%w: consumer %s > %s has ack policy %s, not explicit; delete it or choose another consumer name",
			errUnusable, b.cfg.Stream, b.cfg.Consumer, c.AckPolicy)
	}
	var ch []fieldChange
	if c.MaxDeliver != b.cfg.MaxAttempts {
		ch = append(ch, fieldChange{"max_deliver", fmt.Sprint(c.MaxDeliver), fmt.Sprint(b.cfg.MaxAttempts),
			fmt.Sprintf("--max-deliver %d", b.cfg.MaxAttempts)})
		c.MaxDeliver = b.cfg.MaxAttempts
	}
	if c.AckWait != b.cfg.AckWait {
		ch = append(ch, fieldChange{"ack_wait", c.AckWait.String(), b.cfg.AckWait.String(),
			"--wait " + b.cfg.AckWait.String()})
		c.AckWait = b.cfg.AckWait
	}
	return ch, nil
}

func (b *Bus) reconcileStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, fix streamFix) error {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err = js.CreateStream(ctx, want); err == nil {
			b.log.InfoContext(ctx, "jetstream stream created", "stream", want.Name,
				"subjects", strings.Join(want.Subjects, ","), "duplicate_window", want.Duplicates)
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("create stream %s: %w", want.Name, err)
		}
		// Another worker created it first: reconcile what it made.
		s, err = js.Stream(ctx, want.Name)
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", want.Name, err)
	}
	live := s.CachedInfo().Config
	next := live
	changes := fix(&next)
	if len(changes) == 0 {
		return nil
	}
	b.log.WarnContext(ctx, "jetstream stream config differs from what courier needs; updating it in place",
		"stream", want.Name, "changes", changesString(changes))
	if _, err := js.UpdateStream(ctx, next); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("update stream %s: %w", want.Name, err)
		}
		b.log.WarnContext(ctx, "jetstream stream update refused; edit it by hand",
			"stream", want.Name, "command", "nats stream edit "+want.Name+" "+flags(changes), "err", err)
		return nil
	}
	b.log.InfoContext(ctx, "jetstream stream updated", "stream", want.Name, "changes", changesString(changes))
	return nil
}

func (b *Bus) reconcileConsumer(ctx context.Context, js jetstream.JetStream, stream string, want jetstream.ConsumerConfig, fix consumerFix) error {
	c, err := js.Consumer(ctx, stream, want.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		_, err = js.CreateConsumer(ctx, stream, want)
		if err == nil {
			b.log.InfoContext(ctx, "jetstream consumer created", "stream", stream, "consumer", want.Durable,
				"max_deliver", want.MaxDeliver, "ack_wait", want.AckWait)
			return nil
		}
		if !errors.Is(err, jetstream.ErrConsumerExists) {
			return fmt.Errorf("create consumer %s > %s: %w", stream, want.Durable, err)
		}
		c, err = js.Consumer(ctx, stream, want.Durable)
	}
	if errors.Is(err, jetstream.ErrNotPullConsumer) {
		return fmt.Errorf("%w: consumer %s > %s is a push consumer; delete it or choose another consumer name",
			errUnusable, stream, want.Durable)
	}
	if err != nil {
		return fmt.Errorf("consumer %s > %s: %w", stream, want.Durable, err)
	}
	if fix == nil {
		return nil
	}
	live := c.CachedInfo().Config
	next := live
	changes, err := fix(&next)
	if err != nil {
		return err
	}
	if len(live.BackOff) > 0 {
		b.log.WarnContext(ctx, "jetstream consumer has a backoff list, which adds to every nak delay and replaces ack_wait; remove it",
			"stream", stream, "consumer", want.Durable, "backoff", fmt.Sprint(live.BackOff))
	}
	if len(changes) == 0 {
		return nil
	}
	b.log.WarnContext(ctx, "jetstream consumer config differs from what courier needs; updating it in place",
		"stream", stream, "consumer", want.Durable, "changes", changesString(changes))
	if _, err := js.UpdateConsumer(ctx, stream, next); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("update consumer %s > %s: %w", stream, want.Durable, err)
		}
		b.log.WarnContext(ctx, "jetstream consumer update refused; edit it by hand", "stream", stream,
			"consumer", want.Durable, "command", "nats consumer edit "+stream+" "+want.Durable+" "+flags(changes), "err", err)
		return nil
	}
	b.log.InfoContext(ctx, "jetstream consumer updated", "stream", stream, "consumer", want.Durable,
		"changes", changesString(changes))
	return nil
}

func changesString(cs []fieldChange) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return strings.Join(parts, "; ")
}

func flags(cs []fieldChange) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.flag
	}
	return strings.Join(parts, " ")
}
