package admin

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// RelayInfo is a relay subscription as the API shows it.
type RelayInfo struct {
	URL string `json:"url"`
	// Style is "mastodon" (the URL is the relay's inbox) or "litepub" (the
	// URL is the relay's actor).
	Style string `json:"style"`
	// Actor is the relay actor, once known.
	Actor string `json:"actor,omitempty"`
	// State is pending (Follow sent, no answer yet), accepted or rejected.
	State     string    `json:"state"`
	Follow    string    `json:"follow_activity_id"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// RelayList lists the relays.
type RelayList struct {
	Relays []RelayInfo `json:"relays"`
}

// relayRequest is the body of POST /admin/relays and DELETE /admin/relays.
type relayRequest struct {
	URL string `json:"url"`
}

func relayInfo(r *store.Relay) RelayInfo {
	return RelayInfo{URL: r.URL, Style: r.Style, Actor: r.ActorURI, State: r.State, Follow: r.FollowActivityID,
		CreatedAt: utc(r.CreatedAt), UpdatedAt: utc(r.UpdatedAt)}
}

// relaysOff is the answer of the relay endpoints without Config.Relays.
func (a *API) relaysOff() error {
	if a.cfg.Relays == nil {
		return errorf(ECONFLICT, "relays are not available on this server")
	}
	return nil
}

func (a *API) listRelays(w http.ResponseWriter, r *http.Request) error {
	if err := a.relaysOff(); err != nil {
		return err
	}
	relays, err := a.cfg.Relays.Relays(r.Context())
	if err != nil {
		return err
	}
	out := RelayList{Relays: make([]RelayInfo, 0, len(relays))}
	for i := range relays {
		out.Relays = append(out.Relays, relayInfo(&relays[i]))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (a *API) addRelay(w http.ResponseWriter, r *http.Request) error {
	if err := a.relaysOff(); err != nil {
		return err
	}
	var req relayRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	rel, err := a.cfg.Relays.AddRelay(r.Context(), req.URL)
	if err != nil {
		return err
	}
	a.log.InfoContext(r.Context(), "admin: relay added", "relay", activitypub.RedactURL(rel.URL), "style", rel.Style)
	return writeJSON(w, http.StatusCreated, relayInfo(rel))
}

func (a *API) removeRelay(w http.ResponseWriter, r *http.Request) error {
	if err := a.relaysOff(); err != nil {
		return err
	}
	var req relayRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	rel, err := a.cfg.Relays.RemoveRelay(r.Context(), req.URL)
	if err != nil {
		if store.ErrorCode(err) == store.ENOTFOUND {
			return errorf(ENOTFOUND, "no relay %s", req.URL)
		}
		return err
	}
	a.log.InfoContext(r.Context(), "admin: relay removed", "relay", activitypub.RedactURL(rel.URL))
	return writeJSON(w, http.StatusOK, ActionResult{Action: "unsubscribe", Message: "relay " + rel.URL + " removed; Undo sent"})
}

func renderRelays(w io.Writer, l RelayList) {
	if len(l.Relays) == 0 {
		fmt.Fprintln(w, "no relays")
		return
	}
	tw := newTable(w)
	row(tw, "URL", "STYLE", "STATE", "ACTOR", "SINCE")
	for _, r := range l.Relays {
		row(tw, r.URL, r.Style, r.State, cell(r.Actor), ts(r.UpdatedAt))
	}
	_ = tw.Flush()
}
