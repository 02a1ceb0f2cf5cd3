package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/app/webhook"
)

// Webhooks is what the webhook endpoints need; *webhook.Service
// implements it. Unknown endpoints and actors are store.ENOTFOUND errors,
// malformed input store.EINVALID.
type Webhooks interface {
	Add(ctx context.Context, rawURL, actor string, events []string) (webhook.Endpoint, string, error)
	List(ctx context.Context) ([]webhook.Endpoint, error)
	Get(ctx context.Context, id int64) (webhook.Endpoint, error)
	Remove(ctx context.Context, id int64) error
	Rotate(ctx context.Context, id int64) (string, time.Time, error)
	Test(ctx context.Context, id int64) (string, error)
}

// WebhookInfo is a webhook endpoint as the API shows it: the endpoint and
// the health and delivery counts of its host key, kept like a remote
// host's (pause, resume, retry, drain and reset it under /admin/hosts/).
type WebhookInfo struct {
	webhook.Endpoint
	Health Host `json:"health"`
}

// WebhookList lists the webhook endpoints.
type WebhookList struct {
	Webhooks []WebhookInfo `json:"webhooks"`
}

// WebhookSecret is the answer of an add or a rotation: the only time the
// secret is shown.
type WebhookSecret struct {
	WebhookInfo
	Secret string `json:"secret"`
	// OldSecretsUntil is when the secrets a rotation replaced stop
	// signing.
	OldSecretsUntil time.Time `json:"old_secrets_until,omitzero"`
}

// webhookRequest is the body of POST /admin/webhooks.
type webhookRequest struct {
	URL    string   `json:"url"`
	Actor  string   `json:"actor,omitempty"`
	Events []string `json:"events,omitempty"`
}

func (a *API) webhooksOff() error {
	if a.cfg.Webhooks == nil {
		return errorf(ECONFLICT, "webhooks are not available on this server")
	}
	return nil
}

// webhookID reads the {id} of a route, on a server that has webhooks.
func (a *API) webhookID(r *http.Request) (int64, error) {
	if err := a.webhooksOff(); err != nil {
		return 0, err
	}
	raw := mux.Vars(r)["id"]
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		return 0, errorf(EINVALID, "webhook %q: want an endpoint number such as 1", raw)
	}
	return id, nil
}

// webhookInfo joins an endpoint with its host key's health; an endpoint
// that was never tried has none yet and shows healthy.
func (a *API) webhookInfo(ctx context.Context, ep webhook.Endpoint) (WebhookInfo, error) {
	info := WebhookInfo{Endpoint: ep, Health: Host{Host: ep.Host, State: "healthy"}}
	if a.cfg.Hosts == nil {
		return info, nil
	}
	h, err := a.cfg.Hosts.Host(ctx, ep.Host)
	if errors.Is(err, ErrNotFound) {
		return info, nil
	}
	if err != nil {
		return info, err
	}
	info.Health = h
	return info, nil
}

func (a *API) listWebhooks(w http.ResponseWriter, r *http.Request) error {
	if err := a.webhooksOff(); err != nil {
		return err
	}
	eps, err := a.cfg.Webhooks.List(r.Context())
	if err != nil {
		return err
	}
	out := WebhookList{Webhooks: make([]WebhookInfo, 0, len(eps))}
	for _, ep := range eps {
		info, err := a.webhookInfo(r.Context(), ep)
		if err != nil {
			return err
		}
		out.Webhooks = append(out.Webhooks, info)
	}
	return writeJSON(w, http.StatusOK, out)
}

func (a *API) getWebhook(w http.ResponseWriter, r *http.Request) error {
	id, err := a.webhookID(r)
	if err != nil {
		return err
	}
	ep, err := a.cfg.Webhooks.Get(r.Context(), id)
	if err != nil {
		return err
	}
	info, err := a.webhookInfo(r.Context(), ep)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, info)
}

func (a *API) addWebhook(w http.ResponseWriter, r *http.Request) error {
	if err := a.webhooksOff(); err != nil {
		return err
	}
	var req webhookRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if strings.TrimSpace(req.URL) == "" {
		return errorf(EINVALID, `url is required: {"url": "https://app.example/hooks"}`)
	}
	ep, secret, err := a.cfg.Webhooks.Add(r.Context(), req.URL, req.Actor, req.Events)
	if err != nil {
		return err
	}
	a.log.InfoContext(r.Context(), "admin: webhook endpoint added", "endpoint", ep.ID, "actor", ep.Actor)
	info, err := a.webhookInfo(r.Context(), ep)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, WebhookSecret{WebhookInfo: info, Secret: secret})
}

func (a *API) removeWebhook(w http.ResponseWriter, r *http.Request) error {
	id, err := a.webhookID(r)
	if err != nil {
		return err
	}
	if err := a.cfg.Webhooks.Remove(r.Context(), id); err != nil {
		return err
	}
	// Its queued events are settled (discarded) and its host row goes: it
	// leaves the hosts' listing rather than stay there failing. An event
	// being sent meanwhile finds the endpoint gone and is dropped.
	host := webhook.HostKey(id)
	var discarded int64
	if a.cfg.Hosts != nil {
		n, err := a.cfg.Hosts.Drain(r.Context(), host)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		discarded = n
		if f, ok := a.cfg.Hosts.(hostForgetter); ok {
			if err := f.Forget(r.Context(), host); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
		}
	}
	a.log.InfoContext(r.Context(), "admin: webhook endpoint removed", "endpoint", id, "discarded", discarded)
	return writeJSON(w, http.StatusOK, ActionResult{Action: "remove", Host: host, Count: &discarded,
		Message: fmt.Sprintf("webhook endpoint %d removed; %d queued events discarded, and its host forgotten", id, discarded)})
}

func (a *API) rotateWebhook(w http.ResponseWriter, r *http.Request) error {
	id, err := a.webhookID(r)
	if err != nil {
		return err
	}
	secret, until, err := a.cfg.Webhooks.Rotate(r.Context(), id)
	if err != nil {
		return err
	}
	a.log.InfoContext(r.Context(), "admin: webhook secret rotated", "endpoint", id, "old_secrets_until", until)
	ep, err := a.cfg.Webhooks.Get(r.Context(), id)
	if err != nil {
		return err
	}
	info, err := a.webhookInfo(r.Context(), ep)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, WebhookSecret{WebhookInfo: info, Secret: secret, OldSecretsUntil: utc(until)})
}

func (a *API) testWebhook(w http.ResponseWriter, r *http.Request) error {
	id, err := a.webhookID(r)
	if err != nil {
		return err
	}
	eventID, err := a.cfg.Webhooks.Test(r.Context(), id)
	if err != nil {
		return err
	}
	a.log.InfoContext(r.Context(), "admin: webhook test event enqueued", "endpoint", id, "event_id", eventID)
	return writeJSON(w, http.StatusAccepted, ActionResult{Action: "test", EventID: eventID, Host: webhook.HostKey(id),
		Message: fmt.Sprintf("test event %s enqueued for webhook endpoint %d", eventID, id)})
}

func renderWebhooks(w io.Writer, l WebhookList) {
	if len(l.Webhooks) == 0 {
		fmt.Fprintln(w, "no webhook endpoints")
		return
	}
	tw := newTable(w)
	row(tw, "ID", "URL", "ACTOR", "EVENTS", "HEALTH", "PENDING", "DEAD", "SECRETS", "HOST")
	for _, h := range l.Webhooks {
		actor := h.Actor
		if actor == "" {
			actor = "(all)"
		}
		events := strings.Join(h.Events, ",")
		if events == "" {
			events = "(all)"
		}
		state := h.Health.State
		if h.Health.Paused {
			state += " (paused)"
		}
		row(tw, strconv.FormatInt(h.ID, 10), h.URL, actor, events, state, strconv.FormatInt(h.Health.Pending, 10),
			strconv.FormatInt(h.Health.DeadLettered, 10), strconv.Itoa(h.Secrets), h.Host)
	}
	_ = tw.Flush()
}

func renderWebhookSecret(w io.Writer, s WebhookSecret, rotated bool) {
	if rotated {
		fmt.Fprintf(w, "webhook %d: new secret (the old one keeps signing until %s)\n", s.ID, ts(s.OldSecretsUntil))
	} else {
		fmt.Fprintf(w, "webhook %d added: %s (host key %s)\n", s.ID, s.URL, s.Host)
	}
	fmt.Fprintf(w, "secret: %s\n", s.Secret)
	fmt.Fprintln(w, "it is shown only this once: give it to the receiving application now")
}

// webhookCommands are the CLI's webhooks commands.
func (c *cli) webhookCommands() map[string]command {
	var actor, events string
	idArg := func(pos []string) (string, error) {
		if id, err := strconv.ParseInt(pos[0], 10, 64); err != nil || id <= 0 {
			return "", usagef("webhook %q: want an endpoint number such as 1", pos[0])
		}
		return "/admin/webhooks/" + pos[0], nil
	}
	return map[string]command{
		"": {nargs: []int{0}, run: func(ctx context.Context, _ []string) error {
			var out WebhookList
			return c.get(ctx, "/admin/webhooks", nil, &out, func(w io.Writer) { renderWebhooks(w, out) })
		}},
		"show": {nargs: []int{1}, args: "ID", run: func(ctx context.Context, pos []string) error {
			path, err := idArg(pos)
			if err != nil {
				return err
			}
			var out WebhookInfo
			return c.get(ctx, path, nil, &out, func(w io.Writer) { renderWebhooks(w, WebhookList{Webhooks: []WebhookInfo{out}}) })
		}},
		"add": {
			flags: func(fs *flag.FlagSet) func() error {
				fs.StringVar(&actor, "actor", "", "the local actor whose events it receives (default: every actor)")
				fs.StringVar(&events, "events", "", "the event types it receives, comma-separated (default: every type)")
				return nil
			},
			nargs: []int{1}, args: "URL [--actor NAME] [--events a,b]",
			run: func(ctx context.Context, pos []string) error {
				req := webhookRequest{URL: pos[0], Actor: actor}
				for e := range strings.SplitSeq(events, ",") {
					if e = strings.TrimSpace(e); e != "" {
						req.Events = append(req.Events, e)
					}
				}
				var out WebhookSecret
				raw, err := c.request(ctx, http.MethodPost, "/admin/webhooks", nil, req, &out)
				if err != nil {
					return err
				}
				return c.show(raw, func(w io.Writer) { renderWebhookSecret(w, out, false) })
			},
		},
		"remove": {nargs: []int{1}, args: "ID", run: func(ctx context.Context, pos []string) error {
			path, err := idArg(pos)
			if err != nil {
				return err
			}
			return c.action(ctx, http.MethodDelete, path, nil, nil)
		}},
		"rotate": {nargs: []int{1}, args: "ID", run: func(ctx context.Context, pos []string) error {
			path, err := idArg(pos)
			if err != nil {
				return err
			}
			var out WebhookSecret
			raw, err := c.request(ctx, http.MethodPost, path+"/rotate", nil, nil, &out)
			if err != nil {
				return err
			}
			return c.show(raw, func(w io.Writer) { renderWebhookSecret(w, out, true) })
		}},
		"test": {nargs: []int{1}, args: "ID", run: func(ctx context.Context, pos []string) error {
			path, err := idArg(pos)
			if err != nil {
				return err
			}
			return c.action(ctx, http.MethodPost, path+"/test", nil, nil)
		}},
	}
}

// hostForgetter is the optional Hosts method that removes a host's row.
type hostForgetter interface {
	Forget(ctx context.Context, host string) error
}
