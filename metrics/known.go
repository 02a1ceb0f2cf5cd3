package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Settled outcomes (label outcome of courier_outbox_events_settled_total),
// the String of each outbox.Outcome.
var settledOutcomes = []string{"succeeded", "failed", "deferred", "dead", "released"}

// Outbox row statuses (label status of courier_outbox_rows).
var rowStatuses = []string{"pending", "processing", "done", "dead_lettered"}

// Known is the label values a process knows before any event: what Init
// creates series for, so that a fresh instance's /metrics shows zeros and a
// dashboard or alert query over them returns 0 instead of no data
// (Prometheus' instrumentation guidance: initialise the label values you
// know). Values beyond these still appear when first used.
type Known struct {
	// EventTypes are the outbox event types the process handles or
	// enqueues ("activity.outgoing", "delivery.post", "inbox.received").
	EventTypes []string
	// Handlers are the registered handler names.
	Handlers []string
	// InboxResults are the results an inbound request can end with
	// besides InboxAccepted and InboxDuplicate (the rejection reasons).
	InboxResults []string
	// HostStates are the health states CountHosts reports ("healthy",
	// "failing", "unavailable", "paused").
	HostStates []string
	// FollowersSyncResults are the results of
	// courier_inbox_followers_sync_total (inbox.FollowersSyncResults).
	FollowersSyncResults []string
}

// Init creates the series of every label value in k (and of the values this
// package defines: outcomes, claim results, delivery outcomes and status
// classes) at zero. It may be called more than once; values add up.
func (m *Metrics) Init(k Known) {
	if m == nil {
		return
	}
	o := m.outbox
	for _, typ := range k.EventTypes {
		t := o.types.value(typ)
		o.enqueued.WithLabelValues(t)
		o.deadLettered.WithLabelValues(t)
		for _, out := range settledOutcomes {
			o.settled.WithLabelValues(t, o.settledOutcomes.value(out))
		}
	}
	for _, handler := range k.Handlers {
		h := o.handlers.value(handler)
		o.duration.WithLabelValues(h)
		for _, out := range []string{OutcomeSuccess, OutcomeFailure, OutcomePermanent, OutcomeDeferred,
			OutcomeSkippedDone, OutcomeHeldElsewhere, OutcomeLedgerError, OutcomeInterrupted} {
			o.handled.WithLabelValues(h, o.outcomes.value(out))
		}
		for _, res := range []string{ClaimClaimed, ClaimTakenOver, ClaimHeldElsewhere, ClaimAlreadyDone} {
			o.claims.WithLabelValues(h, o.results.value(res))
		}
	}
	d := m.delivery
	for _, out := range []string{DeliveryDelivered, DeliveryRetry, DeliveryPermanent, DeliveryRefused} {
		v := d.outcomes.value(out)
		d.latency.WithLabelValues(v)
		for _, class := range deliveryClasses(out) {
			d.attempts.WithLabelValues(v, class)
		}
	}
	for _, c := range appCollections {
		v := m.app.cols.value(c)
		m.app.streams.WithLabelValues(v)
		m.app.events.WithLabelValues(v)
	}
	w := m.webhook
	for _, out := range []string{DeliveryDelivered, DeliveryRetry, DeliveryPermanent} {
		v := w.outcomes.value(out)
		w.latency.WithLabelValues(v)
		for _, class := range deliveryClasses(out) {
			w.attempts.WithLabelValues(v, class)
		}
	}
	in := m.inbox
	for _, res := range append([]string{InboxAccepted, InboxDuplicate}, k.InboxResults...) {
		in.requests.WithLabelValues(in.results.value(res))
	}
	for _, reason := range inboxDeferReasons {
		in.deferred.WithLabelValues(in.reasons.value(reason))
	}
	for _, res := range k.FollowersSyncResults {
		in.syncs.WithLabelValues(in.syncRes.value(res))
	}
	m.stats.know(k.EventTypes, k.HostStates)
}

// deliveryClasses are the status classes a delivery outcome is reported
// with: what Attempt can record for it.
func deliveryClasses(outcome string) []string {
	switch outcome {
	case DeliveryDelivered:
		return []string{"2xx"}
	case DeliveryRefused:
		return []string{"none"}
	case DeliveryPermanent:
		return []string{"3xx", "4xx"}
	}
	return []string{"4xx", "5xx", "none"}
}

// know records the event types and host states whose gauges the collector
// reports as 0 when the database has no row of them.
func (c *statsCollector) know(types, states []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range types {
		c.knownTypes = appendNew(c.knownTypes, c.types.value(t))
	}
	for _, s := range states {
		c.knownStates = appendNew(c.knownStates, c.states.value(s))
	}
}

func appendNew(list []string, v string) []string {
	for _, have := range list {
		if have == v {
			return list
		}
	}
	return append(list, v)
}

// zeroRows adds the known (status, type) pairs missing from sums at 0.
func (c *statsCollector) zeroRows(types []string, add func(status, typ string)) {
	for _, st := range rowStatuses {
		s := c.statuses.value(st)
		for _, t := range types {
			add(s, t)
		}
	}
}

var _ prometheus.Collector = (*statsCollector)(nil)
