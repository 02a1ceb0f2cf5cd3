package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/courier-ap/courier/delivery"
)

// Signatures is what the API needs of the per-host signature schemes
// (*delivery.Schemes): what each remote host was learnt to accept (RFC 9421,
// Ed25519) and the schemes a delivery to it tries, in order.
type Signatures interface {
	List(ctx context.Context, after string, limit int) ([]delivery.SchemeStatus, error)
	Status(ctx context.Context, host string) (delivery.SchemeStatus, bool, error)
	Forget(ctx context.Context, host string) error
}

// SignatureStatus is one host's signature schemes (GET /admin/signatures/{host}).
type SignatureStatus = delivery.SchemeStatus

// SignatureList is a page of GET /admin/signatures.
type SignatureList struct {
	Hosts      []delivery.SchemeStatus `json:"hosts"`
	NextCursor string                  `json:"next_cursor,omitempty"`
}

var errNoSignatures = errorf(EUNAVAILABLE, "signature schemes are not available on this server (no delivery service is configured)")

// listSignatures serves GET /admin/signatures: the hosts courier learnt a
// signature scheme of, by name.
func (a *API) listSignatures(w http.ResponseWriter, r *http.Request) error {
	if a.cfg.Signatures == nil {
		return errNoSignatures
	}
	var out SignatureList
	var err error
	out.Hosts, out.NextCursor, err = hostPage(r, a.cfg.Signatures.List, func(h delivery.SchemeStatus) string { return h.Host })
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

// getSignature serves GET /admin/signatures/{host}: one host's schemes; a
// host nothing was learnt of answers with its default order.
func (a *API) getSignature(w http.ResponseWriter, r *http.Request) error {
	if a.cfg.Signatures == nil {
		return errNoSignatures
	}
	host, err := hostParam(r)
	if err != nil {
		return err
	}
	st, _, err := a.cfg.Signatures.Status(r.Context(), host)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}

// forgetSignature serves DELETE /admin/signatures/{host}: forget what was
// learnt, so the host starts again with draft-cavage.
func (a *API) forgetSignature(w http.ResponseWriter, r *http.Request) error {
	if a.cfg.Signatures == nil {
		return errNoSignatures
	}
	host, err := hostParam(r)
	if err != nil {
		return err
	}
	if err := a.cfg.Signatures.Forget(r.Context(), host); err != nil {
		return err
	}
	a.log.InfoContext(r.Context(), "admin: signature schemes forgotten", "host", host, "count", 1)
	return writeJSON(w, http.StatusOK, ActionResult{Action: "forget", Host: host,
		Message: "deliveries to the host start again with draft-cavage"})
}

func renderSignatures(w io.Writer, l SignatureList, hint string) {
	if len(l.Hosts) == 0 {
		fmt.Fprintln(w, "no hosts")
		return
	}
	tw := newTable(w)
	row(tw, "HOST", "RFC 9421", "ED25519", "ORDER", "LEARNT FROM", "UPDATED")
	for _, h := range l.Hosts {
		row(tw, h.Host, schemeState(h.RFC9421, h.RFC9421Until), schemeState(h.Ed25519, h.Ed25519Until),
			schemeOrder(h.Order), cell(h.LearnedFrom), ts(h.UpdatedAt))
	}
	_ = tw.Flush()
	if hint != "" {
		fmt.Fprintln(w, hint)
	}
}

func renderSignature(w io.Writer, h delivery.SchemeStatus) {
	tw := newTable(w)
	row(tw, "host", h.Host)
	row(tw, "rfc 9421", schemeState(h.RFC9421, h.RFC9421Until))
	row(tw, "ed25519", schemeState(h.Ed25519, h.Ed25519Until))
	row(tw, "order", schemeOrder(h.Order))
	if h.NoFallbackUntil != nil {
		row(tw, "fallback", "none until "+ts(*h.NoFallbackUntil)+" (every scheme was refused)")
	}
	row(tw, "learnt from", cell(h.LearnedFrom))
	row(tw, "updated", ts(h.UpdatedAt))
	_ = tw.Flush()
}

// schemeState renders "accepted until ...", "refused until ..." or "-".
func schemeState(state string, until *time.Time) string {
	if state == "" || until == nil {
		return "-"
	}
	return state + " until " + ts(*until)
}

func schemeOrder(order []delivery.Scheme) string {
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}
