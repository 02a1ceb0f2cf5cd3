package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/courier-ap/courier/inbox"
)

// Inbound is the inbox's view of what each remote host sent and its
// inbound budget; cmd wires it to the inbox handler.
type Inbound interface {
	InboundHosts() InboundHosts
}

// InboundHosts answers GET /admin/inbound: the default budgets and every
// remote host that sent since the process started, the most throttled
// first, then the busiest.
type InboundHosts struct {
	// RequestsPerMinute and BytesPerMinute are the default budget of a
	// remote host (COURIER_INBOX_HOST_REQUESTS, COURIER_INBOX_HOST_BYTES).
	RequestsPerMinute float64            `json:"requests_per_minute"`
	BytesPerMinute    float64            `json:"bytes_per_minute"`
	Hosts             []inbox.HostBudget `json:"hosts"`
	// Tombstones is what the remote tombstones hold, when the inbound view
	// gives it (an InboundTombstoner).
	Tombstones *InboundTombstones `json:"tombstones,omitempty"`
}

// InboundTombstones is the remote tombstones' part of GET /admin/inbound:
// every Delete of a remote object leaves one, so that a Create or Update of
// it arriving later is acknowledged and not stored (the import outcome
// named by Outcome).
type InboundTombstones struct {
	Held             int64  `json:"held"`              // remote tombstones held now
	Limit            int    `json:"limit"`             // at most this many; beyond it the oldest go
	RetentionSeconds int64  `json:"retention_seconds"` // each is swept this long after its Delete
	Refused          int64  `json:"refused"`           // Creates and Updates turned away since the store was made
	Outcome          string `json:"outcome"`           // their import outcome: inbox.OutcomeTombstoned
}

// InboundTombstoner is the optional method of an Inbound that adds the
// remote tombstones to the view.
type InboundTombstoner interface {
	InboundTombstones(ctx context.Context) (InboundTombstones, error)
}

var errNoInbound = errorf(EUNAVAILABLE, "the inbound view is not available on this server (no inbox is served)")

func (a *API) inboundHosts(w http.ResponseWriter, r *http.Request) error {
	if a.cfg.Inbound == nil {
		return errNoInbound
	}
	if err := checkParams(r.URL.Query(), map[string]bool{}); err != nil {
		return err
	}
	out := a.cfg.Inbound.InboundHosts()
	if out.Hosts == nil {
		out.Hosts = []inbox.HostBudget{}
	}
	if tv, ok := a.cfg.Inbound.(InboundTombstoner); ok {
		t, err := tv.InboundTombstones(r.Context())
		if err != nil {
			return err
		}
		out.Tombstones = &t
	}
	return writeJSON(w, http.StatusOK, out)
}

func renderInbound(w io.Writer, v InboundHosts) {
	fmt.Fprintf(w, "default budget per remote host: %s requests and %s bytes a minute\n\n",
		float(v.RequestsPerMinute), float(v.BytesPerMinute))
	if t := v.Tombstones; t != nil {
		fmt.Fprintf(w, "remote tombstones: %d held (at most %d, each kept %s); %d late Create/Update acknowledged and not stored (outcome %q)\n\n",
			t.Held, t.Limit, time.Duration(t.RetentionSeconds)*time.Second, t.Refused, t.Outcome)
	}
	tw := newTable(w)
	row(tw, "HOST", "REQUESTS", "BYTES", "IGNORED", "THROTTLED", "LAST THROTTLED", "DEFERRED", "BUDGET REQ/MIN", "BUDGET BYTES/MIN")
	for _, h := range v.Hosts {
		last := "-"
		if !h.LastThrottledAt.IsZero() {
			last = ts(h.LastThrottledAt)
		}
		row(tw, cell(h.Host), num(h.Requests), num(h.Bytes), num(h.Ignored), num(h.Throttled), last,
			num(h.Deferred), float(h.RequestsPerMinute), float(h.BytesPerMinute))
	}
	_ = tw.Flush()
}

func float(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
