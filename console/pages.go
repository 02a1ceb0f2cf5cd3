package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/admin"
)

// overviewData is the overview page.
type overviewData struct {
	Stats    admin.Stats
	Statuses []string
	Types    []typeRow
	// Throughput is absent when the admin API has no delivery record.
	Delivered, Failed *chart
	DeliveredSum      int64
	FailedSum         int64
	RatesError        string
}

type typeRow struct {
	Type   string
	Counts []int64
}

var statusOrder = []string{"pending", "processing", "dead_lettered", "done"}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, s session) error {
	var st admin.Stats
	if err := c.call(r, s, http.MethodGet, "/admin/stats", nil, nil, &st); err != nil {
		return err
	}
	d := overviewData{Stats: st, Statuses: statusOrder}
	types := map[string]bool{}
	for _, byType := range st.Counts {
		for t := range byType {
			types[t] = true
		}
	}
	names := make([]string, 0, len(types))
	for t := range types {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		row := typeRow{Type: t}
		for _, status := range statusOrder {
			row.Counts = append(row.Counts, st.Counts[status][t])
		}
		d.Types = append(d.Types, row)
	}
	var tp admin.Throughput
	if err := c.call(r, s, http.MethodGet, "/admin/throughput", nil, nil, &tp); err != nil {
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status == http.StatusUnauthorized {
			return err
		}
		d.RatesError = ae.Message
	} else {
		var del, fail []int64
		for _, b := range tp.Buckets {
			del = append(del, b.Delivered)
			fail = append(fail, b.Failed)
			d.DeliveredSum += b.Delivered
			d.FailedSum += b.Failed
		}
		d.Delivered = newChart(del, "delivered")
		d.Failed = newChart(fail, "failed")
	}
	c.render(w, r, http.StatusOK, "overview", s, "Overview", d)
	return nil
}

// chart is a small bar chart drawn as inline SVG.
type chart struct {
	Width, Height int
	Bars          []bar
	Max           int64
	Class         string
}

type bar struct {
	X, Y, W, H int
	Title      string
}

const (
	chartHeight = 60
	barWidth    = 6
)

// newChart draws values (one per minute, oldest first) as bars scaled to
// the largest.
func newChart(values []int64, class string) *chart {
	ch := &chart{Width: len(values) * barWidth, Height: chartHeight, Class: class}
	for _, v := range values {
		ch.Max = max(ch.Max, v)
	}
	for i, v := range values {
		h := 0
		if ch.Max > 0 {
			h = int(v * (chartHeight - 2) / ch.Max)
		}
		if v > 0 && h == 0 {
			h = 1
		}
		ch.Bars = append(ch.Bars, bar{X: i * barWidth, Y: chartHeight - h, W: barWidth - 1, H: h,
			Title: fmt.Sprintf("%d min ago: %d %s", len(values)-1-i, v, class)})
	}
	return ch
}

// eventFilter is the filter of the events page and its bulk actions.
type eventFilter struct {
	Status, Type, Host, OlderThan, Error string
}

func filterOf(v url.Values) eventFilter {
	f := eventFilter{
		Status: v.Get("status"), Type: strings.TrimSpace(v.Get("type")), Host: strings.TrimSpace(v.Get("host")),
		OlderThan: strings.TrimSpace(v.Get("older_than")), Error: strings.TrimSpace(v.Get("error")),
	}
	if f.Status == "" {
		f.Status = "dead_lettered"
	}
	return f
}

// query is the admin list query of f (the error filter is the console's).
func (f eventFilter) query() url.Values {
	q := url.Values{"status": {f.Status}}
	for k, v := range map[string]string{"type": f.Type, "host": f.Host, "older_than": f.OlderThan} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// values is f as the page's own query string.
func (f eventFilter) values() url.Values {
	q := f.query()
	if f.Error != "" {
		q.Set("error", f.Error)
	}
	return q
}

func (f eventFilter) matches(e admin.Event) bool {
	return f.Error == "" || strings.Contains(strings.ToLower(e.LastError), strings.ToLower(f.Error))
}

// Actions allowed on events of a status, as the admin API allows them.
func (f eventFilter) CanRetry() bool   { return f.Status == "dead_lettered" }
func (f eventFilter) CanDiscard() bool { return f.Status == "dead_lettered" || f.Status == "pending" }

type eventsData struct {
	Filter   eventFilter
	Statuses []string
	Events   []admin.Event
	Next     string
	Self     string
	Scanned  int
}

func (c *Console) events(w http.ResponseWriter, r *http.Request, s session) error {
	f := filterOf(r.URL.Query())
	q := f.query()
	q.Set("limit", strconv.Itoa(pageLimit))
	if cur := r.URL.Query().Get("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	var list admin.EventList
	if err := c.call(r, s, http.MethodGet, "/admin/events", q, nil, &list); err != nil {
		return err
	}
	d := eventsData{Filter: f, Statuses: []string{"dead_lettered", "stuck", "pending", "processing"},
		Next: list.NextCursor, Scanned: len(list.Events), Self: Prefix + "events?" + f.values().Encode()}
	for _, e := range list.Events {
		if f.matches(e) {
			d.Events = append(d.Events, e)
		}
	}
	c.render(w, r, http.StatusOK, "events", s, "Events", d)
	return nil
}

func (c *Console) event(w http.ResponseWriter, r *http.Request, s session) error {
	var d admin.EventDetail
	if err := c.call(r, s, http.MethodGet, "/admin/events/"+url.PathEscape(mux.Vars(r)["id"]), nil, nil, &d); err != nil {
		return err
	}
	c.render(w, r, http.StatusOK, "event", s, "Event "+strconv.FormatInt(d.Event.RowID, 10), d)
	return nil
}

// eventAction retries or discards one event.
func (c *Console) eventAction(w http.ResponseWriter, r *http.Request, s session) error {
	id, action := mux.Vars(r)["id"], mux.Vars(r)["action"]
	var res admin.ActionResult
	if err := c.call(r, s, http.MethodPost, "/admin/events/"+url.PathEscape(id)+"/"+action, nil, nil, &res); err != nil {
		return err
	}
	flash(w, r, fmt.Sprintf("%s: event %d, %s", action, res.RowID, res.Message))
	back(w, r, Prefix+"events")
	return nil
}

// confirmData is the confirmation page of a bulk or destructive action.
type confirmData struct {
	Question string
	Action   string // the form's target
	Fields   map[string]string
	Count    int
	Capped   bool
	Back     string
}

// bulk retries or discards every event matching a filter: without
// confirm it counts them and asks; with confirm it acts on each, through
// the admin API's per-event operations, at most maxBulk.
func (c *Console) bulk(w http.ResponseWriter, r *http.Request, s session) error {
	f := filterOf(r.PostForm)
	action := r.PostForm.Get("action")
	switch {
	case action == "retry" && f.CanRetry(), action == "discard" && f.CanDiscard():
	default:
		return &apiError{Status: http.StatusBadRequest, Message: fmt.Sprintf("%q is not an action on %s events", action, f.Status)}
	}
	ids, capped, err := c.matching(r, s, f)
	if err != nil {
		return err
	}
	self := Prefix + "events?" + f.values().Encode()
	if r.PostForm.Get("confirm") == "" {
		fields := map[string]string{"action": action, "confirm": strconv.Itoa(len(ids))}
		for k, v := range f.values() {
			fields[k] = v[0]
		}
		c.render(w, r, http.StatusOK, "confirm", s, "Confirm", confirmData{
			Question: fmt.Sprintf("%s %d %s events matching %s?", titleCase(action), len(ids), f.Status, describe(f)),
			Action:   Prefix + "events/bulk", Fields: fields, Count: len(ids), Capped: capped, Back: self})
		return nil
	}
	// Never more than the operator confirmed: rows that came to match
	// since the question wait for the next one.
	confirmed, err := strconv.Atoi(r.PostForm.Get("confirm"))
	if err != nil || confirmed < 0 {
		return &apiError{Status: http.StatusBadRequest, Message: "confirm must be the number of events confirmed"}
	}
	ids = ids[:min(len(ids), confirmed)]
	done, skipped := 0, 0
	for _, id := range ids {
		err := c.call(r, s, http.MethodPost, "/admin/events/"+strconv.FormatInt(id, 10)+"/"+action, nil, nil, nil)
		var ae *apiError
		switch {
		case err == nil:
			done++
		case errors.As(err, &ae) && (ae.Status == http.StatusConflict || ae.Status == http.StatusNotFound):
			skipped++ // changed since it was counted
		default:
			if done > 0 {
				flash(w, r, fmt.Sprintf("%s: %d events before an error", action, done))
			}
			return err
		}
	}
	msg := fmt.Sprintf("%s: %d events", action, done)
	if skipped > 0 {
		msg += fmt.Sprintf(", %d skipped (changed meanwhile)", skipped)
	}
	flash(w, r, msg)
	http.Redirect(w, r, self, http.StatusSeeOther)
	return nil
}

// matching pages through the admin list for the row ids of the events
// matching f, at most maxBulk; capped says it stopped there.
func (c *Console) matching(r *http.Request, s session, f eventFilter) ([]int64, bool, error) {
	var ids []int64
	q := f.query()
	q.Set("limit", "500")
	for {
		var list admin.EventList
		if err := c.call(r, s, http.MethodGet, "/admin/events", q, nil, &list); err != nil {
			return nil, false, err
		}
		for _, e := range list.Events {
			if f.matches(e) {
				if len(ids) == maxBulk {
					return ids, true, nil
				}
				ids = append(ids, e.RowID)
			}
		}
		if list.NextCursor == "" {
			return ids, false, nil
		}
		q.Set("cursor", list.NextCursor)
	}
}

func describe(f eventFilter) string {
	var parts []string
	for _, p := range [][2]string{{"type", f.Type}, {"host", f.Host}, {"older than", f.OlderThan}, {"error containing", f.Error}} {
		if p[1] != "" {
			parts = append(parts, p[0]+" "+strconv.Quote(p[1]))
		}
	}
	if len(parts) == 0 {
		return "no other filter"
	}
	return strings.Join(parts, ", ")
}

func titleCase(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

type hostsData struct {
	Hosts []admin.Host
	Next  string
	Error string
}

func (c *Console) hosts(w http.ResponseWriter, r *http.Request, s session) error {
	q := url.Values{"limit": {strconv.Itoa(pageLimit)}}
	if cur := r.URL.Query().Get("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	var list admin.HostList
	d := hostsData{}
	if err := c.call(r, s, http.MethodGet, "/admin/hosts", q, nil, &list); err != nil {
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
			return err
		}
		d.Error = ae.Message
	}
	d.Hosts, d.Next = list.Hosts, list.NextCursor
	c.render(w, r, http.StatusOK, "hosts", s, "Hosts", d)
	return nil
}

// hostAction runs one per-host control. A drain asks for confirmation
// first, with the number of deliveries it would discard.
func (c *Console) hostAction(w http.ResponseWriter, r *http.Request, s session) error {
	host, action := mux.Vars(r)["host"], mux.Vars(r)["action"]
	q := url.Values{}
	switch action {
	case "pause":
		if reason := strings.TrimSpace(r.PostForm.Get("reason")); reason != "" {
			q.Set("reason", reason)
		}
	case "drain":
		if confirm := r.PostForm.Get("confirm"); confirm != "" {
			q.Set("confirm", confirm)
		}
	}
	path := "/admin/hosts/" + url.PathEscape(host) + "/" + action
	var res admin.ActionResult
	err := c.call(r, s, http.MethodPost, path, q, nil, &res)
	var ae *apiError
	if action == "drain" && errors.As(err, &ae) && ae.Code == string(admin.ECONFIRM) {
		n, _ := ae.Fields["would_discard"].(float64)
		c.render(w, r, http.StatusOK, "confirm", s, "Confirm", confirmData{
			Question: fmt.Sprintf("Drain %s: discard its %d pending deliveries? They are not sent, ever.", host, int64(n)),
			Action:   Prefix + "hosts/" + url.PathEscape(host) + "/drain",
			Fields:   map[string]string{"confirm": host}, Count: int(n), Back: Prefix + "hosts"})
		return nil
	}
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("%s %s: %s", action, host, res.Message)
	if res.Count != nil {
		msg += fmt.Sprintf(" (%d deliveries)", *res.Count)
	}
	flash(w, r, msg)
	back(w, r, Prefix+"hosts")
	return nil
}

type activityData struct {
	ID     string
	Status *admin.ActivityStatus
	States []string
	Next   string
}

func (c *Console) activity(w http.ResponseWriter, r *http.Request, s session) error {
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	d := activityData{ID: id}
	if id != "" {
		// The id of a local activity is the UUID at the end of its URL;
		// the whole URL is accepted too.
		if i := strings.LastIndex(id, "/"); i >= 0 {
			id = id[i+1:]
		}
		q := url.Values{"limit": {strconv.Itoa(pageLimit)}}
		if cur := r.URL.Query().Get("cursor"); cur != "" {
			q.Set("cursor", cur)
		}
		var st admin.ActivityStatus
		if err := c.call(r, s, http.MethodGet, "/admin/activities/"+url.PathEscape(id), q, nil, &st); err != nil {
			return err
		}
		d.Status, d.Next = &st, st.NextCursor
		for k := range st.Summary {
			d.States = append(d.States, k)
		}
		slices.Sort(d.States)
	}
	c.render(w, r, http.StatusOK, "activity", s, "Activity", d)
	return nil
}

type jetstreamData struct {
	Exhausted []admin.Exhausted
	Next      string
	Error     string
}

func (c *Console) jetstream(w http.ResponseWriter, r *http.Request, s session) error {
	q := url.Values{"limit": {strconv.Itoa(pageLimit)}}
	if cur := r.URL.Query().Get("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	var list admin.ExhaustedList
	d := jetstreamData{}
	if err := c.call(r, s, http.MethodGet, "/admin/jetstream/exhausted", q, nil, &list); err != nil {
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
			return err
		}
		d.Error = ae.Message
	}
	d.Exhausted, d.Next = list.Exhausted, list.NextCursor
	c.render(w, r, http.StatusOK, "jetstream", s, "JetStream", d)
	return nil
}

func (c *Console) replay(w http.ResponseWriter, r *http.Request, s session) error {
	id := mux.Vars(r)["id"]
	var res admin.ActionResult
	if err := c.call(r, s, http.MethodPost, "/admin/jetstream/exhausted/"+url.PathEscape(id)+"/replay", nil, nil, &res); err != nil {
		return err
	}
	flash(w, r, "replay of record "+id+": "+res.Message)
	back(w, r, Prefix+"jetstream")
	return nil
}

func (c *Console) blocks(w http.ResponseWriter, r *http.Request, s session) error {
	var list admin.DomainBlockList
	if err := c.call(r, s, http.MethodGet, "/admin/domain-blocks", nil, nil, &list); err != nil {
		return err
	}
	c.render(w, r, http.StatusOK, "blocks", s, "Domain blocks", list)
	return nil
}

func (c *Console) addBlock(w http.ResponseWriter, r *http.Request, s session) error {
	body := map[string]string{"domain": r.PostForm.Get("domain"), "reason": r.PostForm.Get("reason")}
	var res admin.DomainBlock
	if err := c.call(r, s, http.MethodPost, "/admin/domain-blocks", nil, body, &res); err != nil {
		return err
	}
	flash(w, r, "blocked "+res.Domain)
	http.Redirect(w, r, Prefix+"blocks", http.StatusSeeOther)
	return nil
}

func (c *Console) removeBlock(w http.ResponseWriter, r *http.Request, s session) error {
	domain := r.PostForm.Get("domain")
	if err := c.call(r, s, http.MethodDelete, "/admin/domain-blocks/"+url.PathEscape(domain), nil, nil, nil); err != nil {
		return err
	}
	flash(w, r, "unblocked "+domain)
	http.Redirect(w, r, Prefix+"blocks", http.StatusSeeOther)
	return nil
}

type relaysData struct {
	Relays []admin.RelayInfo
	// Error is the API's answer when relays are not available here.
	Error string
}

func (c *Console) relays(w http.ResponseWriter, r *http.Request, s session) error {
	var list admin.RelayList
	d := relaysData{}
	if err := c.call(r, s, http.MethodGet, "/admin/relays", nil, nil, &list); err != nil {
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
			return err
		}
		d.Error = ae.Message
	}
	d.Relays = list.Relays
	c.render(w, r, http.StatusOK, "relays", s, "Relays", d)
	return nil
}

// addRelay subscribes to a relay: the admin API stores it pending and
// sends the instance actor's Follow.
func (c *Console) addRelay(w http.ResponseWriter, r *http.Request, s session) error {
	var res admin.RelayInfo
	if err := c.call(r, s, http.MethodPost, "/admin/relays", nil, map[string]string{"url": r.PostForm.Get("url")}, &res); err != nil {
		return err
	}
	flash(w, r, fmt.Sprintf("relay %s (%s): %s, Follow sent", res.URL, res.Style, res.State))
	http.Redirect(w, r, Prefix+"relays", http.StatusSeeOther)
	return nil
}

// removeRelay unsubscribes from a relay: without confirm it asks; with
// confirm naming the relay the admin API removes it and sends the Undo.
func (c *Console) removeRelay(w http.ResponseWriter, r *http.Request, s session) error {
	u := r.PostForm.Get("url")
	if u == "" {
		return &apiError{Status: http.StatusBadRequest, Message: "url is required: the relay to remove"}
	}
	if r.PostForm.Get("confirm") != u {
		c.render(w, r, http.StatusOK, "confirm", s, "Confirm", confirmData{
			Question: fmt.Sprintf("Remove relay %s? courier sends it an Undo of the Follow and stops relaying to it.", u),
			Action:   Prefix + "relays/remove", Fields: map[string]string{"url": u, "confirm": u}, Count: 1,
			Back: Prefix + "relays"})
		return nil
	}
	var res admin.ActionResult
	if err := c.call(r, s, http.MethodDelete, "/admin/relays", nil, map[string]string{"url": u}, &res); err != nil {
		return err
	}
	flash(w, r, res.Message)
	http.Redirect(w, r, Prefix+"relays", http.StatusSeeOther)
	return nil
}

type webhooksData struct {
	Webhooks []admin.WebhookInfo
	// Secret is a secret just made (by an add or a rotation), shown this
	// once; SecretWhat says which.
	Secret, SecretWhat string
	// Error is the API's answer when webhooks are not available here.
	Error string
}

func (c *Console) webhooks(w http.ResponseWriter, r *http.Request, s session) error {
	return c.renderWebhooks(w, r, s, webhooksData{})
}

// renderWebhooks renders the webhooks page with d's secret, if any.
func (c *Console) renderWebhooks(w http.ResponseWriter, r *http.Request, s session, d webhooksData) error {
	var list admin.WebhookList
	if err := c.call(r, s, http.MethodGet, "/admin/webhooks", nil, nil, &list); err != nil {
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
			return err
		}
		d.Error = ae.Message
	}
	d.Webhooks = list.Webhooks
	w.Header().Set("Cache-Control", "no-store")
	c.render(w, r, http.StatusOK, "webhooks", s, "Webhooks", d)
	return nil
}

// addWebhook adds an endpoint and shows its secret on the page it
// answers (never in a redirect, a cookie or a log).
func (c *Console) addWebhook(w http.ResponseWriter, r *http.Request, s session) error {
	body := map[string]any{"url": strings.TrimSpace(r.PostForm.Get("url"))}
	if a := strings.TrimSpace(r.PostForm.Get("actor")); a != "" {
		body["actor"] = a
	}
	var events []string
	for e := range strings.SplitSeq(r.PostForm.Get("events"), ",") {
		if e = strings.TrimSpace(e); e != "" {
			events = append(events, e)
		}
	}
	if len(events) > 0 {
		body["events"] = events
	}
	var res admin.WebhookSecret
	if err := c.call(r, s, http.MethodPost, "/admin/webhooks", nil, body, &res); err != nil {
		return err
	}
	return c.renderWebhooks(w, r, s, webhooksData{Secret: res.Secret,
		SecretWhat: fmt.Sprintf("Webhook %d added (%s). Its secret:", res.ID, res.URL)})
}

func (c *Console) rotateWebhook(w http.ResponseWriter, r *http.Request, s session) error {
	id := mux.Vars(r)["id"]
	var res admin.WebhookSecret
	if err := c.call(r, s, http.MethodPost, "/admin/webhooks/"+id+"/rotate", nil, nil, &res); err != nil {
		return err
	}
	return c.renderWebhooks(w, r, s, webhooksData{Secret: res.Secret,
		SecretWhat: fmt.Sprintf("Webhook %d has a new secret; the old one keeps signing until %s. The new secret:",
			res.ID, res.OldSecretsUntil.Format(time.RFC3339))})
}

func (c *Console) testWebhook(w http.ResponseWriter, r *http.Request, s session) error {
	id := mux.Vars(r)["id"]
	var res admin.ActionResult
	if err := c.call(r, s, http.MethodPost, "/admin/webhooks/"+id+"/test", nil, nil, &res); err != nil {
		return err
	}
	flash(w, r, res.Message)
	http.Redirect(w, r, Prefix+"webhooks", http.StatusSeeOther)
	return nil
}

// removeWebhook removes an endpoint after a confirmation.
func (c *Console) removeWebhook(w http.ResponseWriter, r *http.Request, s session) error {
	id := mux.Vars(r)["id"]
	if r.PostForm.Get("confirm") != id {
		c.render(w, r, http.StatusOK, "confirm", s, "Confirm", confirmData{
			Question: fmt.Sprintf("Remove webhook %s? Its queued events are dropped.", id),
			Action:   Prefix + "webhooks/" + id + "/remove", Fields: map[string]string{"confirm": id}, Count: 1,
			Back: Prefix + "webhooks"})
		return nil
	}
	var res admin.ActionResult
	if err := c.call(r, s, http.MethodDelete, "/admin/webhooks/"+id, nil, nil, &res); err != nil {
		return err
	}
	flash(w, r, res.Message)
	http.Redirect(w, r, Prefix+"webhooks", http.StatusSeeOther)
	return nil
}
