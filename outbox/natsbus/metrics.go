package natsbus

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-ap/courier/outbox"
)

// busMetrics are the bus's Prometheus metrics. A nil *busMetrics records
// nothing (Config.Registerer nil).
type busMetrics struct {
	maxDeliveries prometheus.Counter
	terminated    prometheus.Counter
	relayed       prometheus.Counter
	deferredRows  prometheus.Counter
	deliveries    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*busMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &busMetrics{
		maxDeliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "courier_jetstream_max_deliveries_total",
			Help: "JetStream max-deliveries advisories recorded: events the consumer gave up on after max_deliver deliveries.",
		}),
		terminated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "courier_jetstream_terminated_total",
			Help: "JetStream terminated advisories recorded: events terminated after a permanent failure.",
		}),
		relayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "courier_nats_relay_published_total",
			Help: "Outbox rows published to NATS and marked done by the relay.",
		}),
		deferredRows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "courier_nats_relay_deferred_total",
			Help: "Outbox rows the relay deferred, without spending an attempt, because NATS did not acknowledge them.",
		}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "courier_nats_deliveries_total",
			Help: "Messages the NATS consumer ran through the handlers, by outcome.",
		}, []string{"outcome"}),
	}
	var err error
	m.maxDeliveries, err = register(reg, m.maxDeliveries)
	if err != nil {
		return nil, err
	}
	if m.terminated, err = register(reg, m.terminated); err != nil {
		return nil, err
	}
	if m.relayed, err = register(reg, m.relayed); err != nil {
		return nil, err
	}
	if m.deferredRows, err = register(reg, m.deferredRows); err != nil {
		return nil, err
	}
	if m.deliveries, err = register(reg, m.deliveries); err != nil {
		return nil, err
	}
	// Every outcome exists from the start, so a fresh instance shows 0
	// rather than no series.
	for _, o := range []outbox.Outcome{outbox.Succeeded, outbox.Failed, outbox.Deferred, outbox.Dead, outbox.Released} {
		m.deliveries.WithLabelValues(o.String())
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// its name (a second Bus on the same registry shares the counters).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("natsbus: register metrics: %w", err)
	}
	return c, nil
}

func (m *busMetrics) advisory(reason string) {
	if m == nil {
		return
	}
	switch reason {
	case reasonMaxDeliveries:
		m.maxDeliveries.Inc()
	case reasonTerminated:
		m.terminated.Inc()
	}
}

func (m *busMetrics) published(n int) {
	if m != nil {
		m.relayed.Add(float64(n))
	}
}

func (m *busMetrics) deferred(n int) {
	if m != nil {
		m.deferredRows.Add(float64(n))
	}
}

func (m *busMetrics) delivered(o outbox.Outcome) {
	if m != nil {
		m.deliveries.WithLabelValues(o.String()).Inc()
	}
}
