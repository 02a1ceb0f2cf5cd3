package admin

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"time"
)

// Throughput window and step.
const (
	throughputWindow = time.Hour
	throughputStep   = time.Minute
)

// RateBucket counts the delivery attempts of one step of time.
type RateBucket struct {
	Start time.Time `json:"start"`
	// Delivered counts 2xx answers; Failed every other attempt (retried,
	// permanent, refused, given up).
	Delivered int64 `json:"delivered"`
	Failed    int64 `json:"failed"`
}

// Throughput is the delivery attempts of the last hour, minute by minute,
// oldest first; every minute of the window is present.
type Throughput struct {
	StepSeconds int64        `json:"step_seconds"`
	Buckets     []RateBucket `json:"buckets"`
}

// Rates is what the API needs to count recent delivery attempts.
// NewDeliveryRates returns the implementation over the courier database.
type Rates interface {
	// DeliveryRates counts the attempts made at or after since, by step,
	// keyed by the step's start in Unix milliseconds (a multiple of step).
	DeliveryRates(ctx context.Context, since time.Time, step time.Duration) (map[int64]RateBucket, error)
}

// NewDeliveryRates counts delivery attempts in read's delivery_attempts
// table. The query reads the attempts of the window only, through the
// table's attempted_at index, so it costs the same at any history.
func NewDeliveryRates(read *sql.DB) Rates { return &deliveryRates{read: read} }

type deliveryRates struct{ read *sql.DB }

func (d *deliveryRates) DeliveryRates(ctx context.Context, since time.Time, step time.Duration) (map[int64]RateBucket, error) {
	ms := step.Milliseconds()
	rs, err := d.read.QueryContext(ctx, `SELECT (attempted_at / ?) * ?, SUM(CASE WHEN outcome = 'delivered' THEN 1 ELSE 0 END),
		SUM(CASE WHEN outcome <> 'delivered' THEN 1 ELSE 0 END)
		FROM delivery_attempts WHERE attempted_at >= ? GROUP BY 1`, ms, ms, since.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("admin: delivery rates: %w", err)
	}
	defer rs.Close()
	out := map[int64]RateBucket{}
	for rs.Next() {
		var start int64
		var b RateBucket
		if err := rs.Scan(&start, &b.Delivered, &b.Failed); err != nil {
			return nil, fmt.Errorf("admin: delivery rates: %w", err)
		}
		out[start] = b
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("admin: delivery rates: %w", err)
	}
	return out, nil
}

func (a *API) throughput(w http.ResponseWriter, r *http.Request) error {
	if a.cfg.Rates == nil {
		return errorf(EUNAVAILABLE, "delivery rates are not available on this server (no delivery record is configured)")
	}
	if err := checkParams(r.URL.Query(), nil); err != nil {
		return err
	}
	step := throughputStep
	now := a.cfg.Now()
	first := now.Add(-throughputWindow).Truncate(step).Add(step)
	got, err := a.cfg.Rates.DeliveryRates(r.Context(), first, step)
	if err != nil {
		return err
	}
	out := Throughput{StepSeconds: int64(step / time.Second)}
	for t := first; !t.After(now); t = t.Add(step) {
		b := got[t.UnixMilli()]
		b.Start = t.UTC()
		out.Buckets = append(out.Buckets, b)
	}
	return writeJSON(w, http.StatusOK, out)
}
