package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of one handler run (label outcome of
// courier_outbox_events_handled_total), as the outbox runner reports them.
const (
	OutcomeSuccess       = "success"        // the handler returned nil; the ledger marked it done
	OutcomeFailure       = "failure"        // an error that spends an attempt
	OutcomePermanent     = "permanent"      // a permanent error: the event is dead-lettered
	OutcomeDeferred      = "deferred"       // postponed without spending an attempt
	OutcomeSkippedDone   = "skipped_done"   // the ledger had it done: the handler did not run
	OutcomeHeldElsewhere = "held_elsewhere" // a fresh ledger claim held by another run: deferred
	OutcomeLedgerError   = "ledger_error"   // the ledger could not be read: skipped and retried
	OutcomeInterrupted   = "interrupted"    // shutdown ended the run: released, nothing spent
)

// Results of a ledger claim (label result of
// courier_outbox_ledger_claims_total).
const (
	ClaimClaimed       = "claimed"        // a new in_progress row was inserted
	ClaimTakenOver     = "taken_over"     // a claim older than the lease was taken over
	ClaimHeldElsewhere = "held_elsewhere" // a fresh claim is held by another run: defer
	ClaimAlreadyDone   = "already_done"   // the row is done: skip the handler
)

// Outbox records the outbox's own activity: events enqueued, claimed and
// settled, how each handler run ended and how long it took, ledger claims
// and dead letters. The row counts and queue age are read from the database
// at scrape time (see QueueStats). A nil *Outbox records nothing.
//
// Its methods have the shapes of the fields of outbox.Observer, so wiring is
// one method value per field (see the package documentation).
type Outbox struct {
	enqueued     *prometheus.CounterVec
	claimed      prometheus.Counter
	handled      *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	settled      *prometheus.CounterVec
	deadLettered *prometheus.CounterVec
	claims       *prometheus.CounterVec

	types, handlers, outcomes, settledOutcomes, results *labelGuard
}

func newOutbox(r *registrar) *Outbox {
	const sub = "outbox"
	return &Outbox{
		enqueued: counterVec(r, sub, "events_enqueued_total",
			"Events inserted into the outbox, by event type (counted at insert: conflict-ignored duplicates are not counted, a rolled-back transaction's are).", "type"),
		claimed: counter(r, sub, "rows_claimed_total",
			"Outbox rows claimed by the db worker (reclaimed rows whose lease expired included)."),
		handled: counterVec(r, sub, "events_handled_total",
			"Handler runs by handler and outcome (success, failure, permanent, deferred, skipped_done, held_elsewhere, ledger_error, interrupted).",
			"handler", "outcome"),
		duration: histogramVec(r, sub, "handler_duration_seconds",
			"Time spent in a handler, by handler (runs the ledger skipped are not observed).", durationBuckets, "handler"),
		settled: counterVec(r, sub, "events_settled_total",
			"Deliveries of an event to all its handlers, by event type and outcome (succeeded, failed, deferred, dead, released).",
			"type", "outcome"),
		deadLettered: counterVec(r, sub, "events_dead_lettered_total",
			"Events given up on (max attempts spent or a permanent error), by event type.", "type"),
		claims: counterVec(r, sub, "ledger_claims_total",
			"Processed-events ledger claims by handler and result (claimed, taken_over, held_elsewhere, already_done).",
			"handler", "result"),
		types:           r.guard(),
		handlers:        r.guard(),
		outcomes:        r.guard(),
		settledOutcomes: r.guard(),
		results:         r.guard(),
	}
}

// Enqueued counts n events of eventType inserted into the outbox; it has the
// shape of the function outbox.WithEnqueueObserver takes.
func (o *Outbox) Enqueued(eventType string, n int) {
	if o == nil || n <= 0 {
		return
	}
	o.enqueued.WithLabelValues(o.types.value(eventType)).Add(float64(n))
}

// Claimed counts n rows claimed by the db worker in one batch.
func (o *Outbox) Claimed(n int) {
	if o == nil || n <= 0 {
		return
	}
	o.claimed.Add(float64(n))
}

// Handled counts one run of handler for an event of eventType ending with
// outcome (one of the Outcome* values) and, when the handler ran (d > 0),
// observes its duration. Runs are counted by handler, which already implies
// the event type, to keep the series count down.
func (o *Outbox) Handled(eventType, handler, outcome string, d time.Duration) {
	if o == nil {
		return
	}
	h := o.handlers.value(handler)
	o.handled.WithLabelValues(h, o.outcomes.value(outcome)).Inc()
	if d > 0 {
		o.duration.WithLabelValues(h).Observe(d.Seconds())
	}
}

// Settled counts one delivery of an event of eventType to all its handlers,
// ending with outcome (the String of an outbox.Outcome: succeeded, failed,
// deferred, dead, released).
func (o *Outbox) Settled(eventType, outcome string) {
	if o == nil {
		return
	}
	o.settled.WithLabelValues(o.types.value(eventType), o.settledOutcomes.value(outcome)).Inc()
}

// DeadLettered counts one event of eventType given up on.
func (o *Outbox) DeadLettered(eventType string) {
	if o == nil {
		return
	}
	o.deadLettered.WithLabelValues(o.types.value(eventType)).Inc()
}

// LedgerClaimed counts one ledger claim by handler ending with result (one
// of the Claim* values).
func (o *Outbox) LedgerClaimed(handler, result string) {
	if o == nil {
		return
	}
	o.claims.WithLabelValues(o.handlers.value(handler), o.results.value(result)).Inc()
}

// Outcomes of one delivery POST (label outcome of courier_delivery_*).
const (
	DeliveryDelivered = "delivered" // 2xx
	DeliveryRetry     = "retry"     // 408, 429, 5xx, timeout, connection error: retried
	DeliveryPermanent = "permanent" // 410 and other 4xx: recorded, not retried
	DeliveryRefused   = "refused"   // not sent: private address or invalid target
)

// Delivery records outgoing deliveries. Host health and parked deliveries
// are read at scrape time (see HostStats). A nil *Delivery records nothing.
type Delivery struct {
	attempts *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	parked   *prometheus.CounterVec
	// superseded and orderWaits: see Superseded and OrderWait.
	superseded, orderWaits prometheus.Counter

	outcomes, states *labelGuard
}

// Host states under which deliveries are parked (label state of
// courier_delivery_parked_total); their series exist from the start, so a
// rate() over them is 0, not absent, before the first parking.
const (
	ParkedUnavailable = "unavailable"
	ParkedPaused      = "paused"
)

func newDelivery(r *registrar) *Delivery {
	const sub = "delivery"
	d := &Delivery{
		attempts: counterVec(r, sub, "attempts_total",
			"Delivery POSTs to remote inboxes by outcome (delivered, retry, permanent, refused) and HTTP status class (2xx..5xx, none when no response arrived).",
			"outcome", "status_class"),
		latency: histogramVec(r, sub, "duration_seconds",
			"Time from sending a delivery POST to its response or failure, by outcome.", durationBuckets, "outcome"),
		parked: counterVec(r, sub, "parked_total",
			"Deliveries parked (postponed without spending an attempt) because their host was known down, by host state.", "state"),
		superseded: counter(r, sub, "superseded_total",
			"Deliveries of a Create or Update settled without being sent because their object was deleted first."),
		orderWaits: counter(r, sub, "order_waits_total",
			"Times a delivery was deferred, without spending an attempt, while an earlier delivery of the same object to the same inbox was unsettled."),
		outcomes: r.guard(),
		states:   r.guard(),
	}
	for _, st := range []string{ParkedUnavailable, ParkedPaused} {
		d.parked.WithLabelValues(d.states.value(st))
	}
	return d
}

// Attempt records one delivery POST: its outcome (DeliveryDelivered,
// DeliveryRetry, DeliveryPermanent, DeliveryRefused), the HTTP status (0 when
// no response arrived) and how long it took.
func (d *Delivery) Attempt(outcome string, status int, took time.Duration) {
	if d == nil {
		return
	}
	o := d.outcomes.value(outcome)
	d.attempts.WithLabelValues(o, StatusClass(status)).Inc()
	if took > 0 {
		d.latency.WithLabelValues(o).Observe(took.Seconds())
	}
}

// Webhook is the metrics of webhook POSTs to the applications' endpoints
// (package app/webhook), sent by the delivery machinery.
type Webhook struct {
	attempts *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	outcomes *labelGuard
}

func newWebhook(r *registrar) *Webhook {
	const sub = "webhook"
	return &Webhook{
		attempts: counterVec(r, sub, "attempts_total",
			"Webhook POSTs to application endpoints by outcome (delivered, retry, permanent) and HTTP status class (2xx..5xx, none when no response arrived).",
			"outcome", "status_class"),
		latency: histogramVec(r, sub, "duration_seconds",
			"Time from sending a webhook POST to its response or failure, by outcome.", durationBuckets, "outcome"),
		outcomes: r.guard(),
	}
}

// Attempt records one webhook POST, as Delivery.Attempt does a delivery.
func (w *Webhook) Attempt(outcome string, status int, took time.Duration) {
	if w == nil {
		return
	}
	o := w.outcomes.value(outcome)
	w.attempts.WithLabelValues(o, StatusClass(status)).Inc()
	if took > 0 {
		w.latency.WithLabelValues(o).Observe(took.Seconds())
	}
}

// Superseded counts one delivery settled as superseded: a Create or Update
// not sent because its object was deleted before it went.
func (d *Delivery) Superseded() {
	if d != nil {
		d.superseded.Inc()
	}
}

// OrderWait counts one delivery deferred while an earlier delivery of the
// same object to the same inbox is unsettled.
func (d *Delivery) OrderWait() {
	if d != nil {
		d.orderWaits.Inc()
	}
}

// Parked counts one delivery postponed because its host is in state (for
// instance "unavailable").
func (d *Delivery) Parked(state string) {
	if d == nil {
		return
	}
	d.parked.WithLabelValues(d.states.value(state)).Inc()
}

// Results of an inbound request other than rejections (label result of
// courier_inbox_requests_total). Rejections use their reason as the result
// ("bad_signature", "digest_mismatch", "date_out_of_window", ...).
const (
	InboxAccepted  = "accepted"  // verified, stored, answered 202
	InboxDuplicate = "duplicate" // an activity already stored, answered 202
)

// Reasons an inbound request is deferred (answered 503 with Retry-After,
// label reason of courier_inbox_deferred_total): a temporary condition on
// courier's side, never a verdict on the request.
const (
	InboxDeferredKeyHostBusy        = "key_host_busy"        // the fetch gate holds the key's host, or the key's fetch is in flight too long
	InboxDeferredKeyHostUnavailable = "key_host_unavailable" // the key's fetch timed out, failed on the network or got a 5xx
	InboxDeferredDatabaseBusy       = "database_busy"        // the database was locked or refused the transaction for now
)

// inboxDeferReasons are the reasons Init creates series for.
var inboxDeferReasons = []string{InboxDeferredKeyHostBusy, InboxDeferredKeyHostUnavailable, InboxDeferredDatabaseBusy}

// Results of an inbound activity's forwarding to local actors' followers
// (label result of courier_inbox_forwards_total).
const (
	InboxForwarded    = "forwarded"    // its forward was enqueued (once per activity)
	InboxUnverifiable = "unverifiable" // due a forward, but carries neither an FEP-8b32 proof nor an LD signature
)

// Inbox records inbound requests to the inboxes. A nil *Inbox records
// nothing.
type Inbox struct {
	requests *prometheus.CounterVec
	results  *labelGuard
	deferred *prometheus.CounterVec
	reasons  *labelGuard
	syncs    *prometheus.CounterVec
	syncRes  *labelGuard
	forwards *prometheus.CounterVec
}

func newInbox(r *registrar) *Inbox {
	i := &Inbox{
		requests: counterVec(r, "inbox", "requests_total",
			"Inbound inbox POSTs by result: accepted, duplicate, or the rejection reason.", "result"),
		results: r.guard(),
		deferred: counterVec(r, "inbox", "deferred_total",
			"Inbound inbox POSTs answered 503 with Retry-After for a temporary condition on courier's side, by reason.", "reason"),
		reasons: r.guard(),
		syncs: counterVec(r, "inbox", "followers_sync_total",
			"Followers synchronization (FEP-8fcf) of remote actors: headers seen by result (in_sync, requested, ignored) and syncs run by result.", "result"),
		syncRes: r.guard(),
		forwards: counterVec(r, "inbox", "forwards_total",
			"Inbound activities due a forward to local actors' followers (ActivityPub 7.1.2), by result: forwarded, or unverifiable (neither an integrity proof nor an LD signature, so not forwarded).", "result"),
	}
	for _, res := range []string{InboxForwarded, InboxUnverifiable} {
		i.forwards.WithLabelValues(res)
	}
	return i
}

// Forward counts one inbound activity due a forward, by result
// (InboxForwarded or InboxUnverifiable).
func (i *Inbox) Forward(result string) {
	if i == nil {
		return
	}
	i.forwards.WithLabelValues(result).Inc()
}

// FollowersSync counts one Collection-Synchronization header looked at, or
// one followers synchronization run, by result.
func (i *Inbox) FollowersSync(result string) {
	if i == nil {
		return
	}
	i.syncs.WithLabelValues(i.syncRes.value(result)).Inc()
}

// Deferred counts one inbound request answered 503 for reason (one of the
// InboxDeferred constants).
func (i *Inbox) Deferred(reason string) {
	if i == nil {
		return
	}
	i.deferred.WithLabelValues(i.reasons.value(reason)).Inc()
}

// Request counts one inbound request ending with result: InboxAccepted,
// InboxDuplicate, or a short snake_case rejection reason.
func (i *Inbox) Request(result string) {
	if i == nil {
		return
	}
	i.requests.WithLabelValues(i.results.value(result)).Inc()
}

// Relay records the state of the JetStream relay. The relay's publish and
// defer counters are registered by the JetStream bus itself (see
// ExternalNames). A nil *Relay records nothing.
type Relay struct {
	paused prometheus.Gauge
	lag    prometheus.Gauge
}

func newRelay(r *registrar) *Relay {
	const sub = "relay"
	return &Relay{
		paused: gauge(r, sub, "paused",
			"1 while the relay is paused because the broker is unreachable, else 0."),
		lag: gauge(r, sub, "lag_seconds",
			"How long the oldest row of the relay's latest batch had been due when it was published (0 when idle)."),
	}
}

// SetPaused records whether the relay is paused.
func (r *Relay) SetPaused(paused bool) {
	if r == nil {
		return
	}
	if paused {
		r.paused.Set(1)
	} else {
		r.paused.Set(0)
	}
}

// SetLag records the relay's lag: how long the oldest row of its latest batch
// had been due. Negative values are recorded as 0.
func (r *Relay) SetLag(d time.Duration) {
	if r == nil {
		return
	}
	r.lag.Set(max(d, 0).Seconds())
}

// Collections of an application stream (label collection of
// courier_app_streams and courier_app_stream_events_total).
var appCollections = []string{"inbox", "outbox"}

// App is the metrics of the application's event streams (package app):
// the streams open and the events they sent, by collection (inbox,
// outbox). A nil *App records nothing.
type App struct {
	streams *prometheus.GaugeVec
	events  *prometheus.CounterVec
	cols    *labelGuard
}

func newApp(r *registrar) *App {
	const sub = "app"
	return &App{
		streams: gaugeVec(r, sub, "streams",
			"Server-Sent Events streams open in this process, by collection (inbox, outbox).", "collection"),
		events: counterVec(r, sub, "stream_events_total",
			"Events sent on Server-Sent Events streams, by collection (inbox, outbox); an event sent to two streams counts twice.",
			"collection"),
		cols: r.guard(),
	}
}

// StreamOpened adds d (1 when a stream opens, -1 when it ends) to the open
// streams of collection.
func (a *App) StreamOpened(collection string, d int) {
	if a == nil {
		return
	}
	a.streams.WithLabelValues(a.cols.value(collection)).Add(float64(d))
}

// StreamEvents counts n events sent on a stream of collection.
func (a *App) StreamEvents(collection string, n int) {
	if a == nil || n <= 0 {
		return
	}
	a.events.WithLabelValues(a.cols.value(collection)).Add(float64(n))
}
