package admin

import (
	"fmt"
	"io"
	"net/http"
	"strconv"

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
	return writeJSON(w, http.StatusOK, out)
}

func renderInbound(w io.Writer, v InboundHosts) {
	fmt.Fprintf(w, "default budget per remote host: %s requests and %s bytes a minute\n\n",
		float(v.RequestsPerMinute), float(v.BytesPerMinute))
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
