package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The CLI's tables. Cells are single-line and bounded, so one bad value
// cannot wreck a table.

const maxCell = 60

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// row writes one tab-separated table row.
func row(tw io.Writer, cells ...string) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(tw, "\t")
		}
		fmt.Fprint(tw, c)
	}
	fmt.Fprintln(tw)
}

// cell makes s fit a table cell: one line, tabs and control characters
// replaced, at most maxCell runes, "-" when empty.
func cell(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.TrimSpace(s))
	if s == "" {
		return "-"
	}
	if r := []rune(s); len(r) > maxCell {
		return string(r[:maxCell-1]) + "…"
	}
	return s
}

func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// age renders a duration compactly: 45s, 12m3s, 5h4m, 3d2h.
func age(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", d/time.Minute, (d%time.Minute)/time.Second)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", d/time.Hour, (d%time.Hour)/time.Minute)
	}
	return fmt.Sprintf("%dd%dh", d/(24*time.Hour), (d%(24*time.Hour))/time.Hour)
}

func num[T int | int64 | uint64](n T) string { return strconv.FormatInt(int64(n), 10) }

func status(s string, stuck bool) string {
	if stuck {
		return s + " (stuck)"
	}
	return s
}

// eventStatus is an event's status as shown: a superseded delivery reads
// "done (superseded)".
func eventStatus(e Event) string {
	if e.Superseded {
		return e.Status + " (superseded)"
	}
	return status(e.Status, e.Stuck)
}

func renderStats(w io.Writer, s Stats) {
	tw := newTable(w)
	row(tw, "STATUS", "TYPE", "COUNT")
	statuses := make([]string, 0, len(s.Counts))
	for st := range s.Counts {
		statuses = append(statuses, st)
	}
	sort.Strings(statuses)
	for _, st := range statuses {
		types := make([]string, 0, len(s.Counts[st]))
		for t := range s.Counts[st] {
			types = append(types, t)
		}
		sort.Strings(types)
		for _, t := range types {
			row(tw, st, cell(t), num(s.Counts[st][t]))
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\ntotals: pending %d, processing %d (stuck %d, lease %s), dead_lettered %d, done %d\n",
		s.Totals["pending"], s.Totals["processing"], s.Stuck, age(time.Duration(s.LeaseSeconds)*time.Second),
		s.Totals["dead_lettered"], s.Totals["done"])
	if len(s.Processes) > 0 {
		fmt.Fprintf(w, "delivering processes: %d (each host's per-host concurrency is shared among them)\n", len(s.Processes))
		for _, p := range s.Processes {
			fmt.Fprintf(w, "  %s pid %d, up since %s, seen %s\n", p.Hostname, p.PID,
				p.StartedAt.UTC().Format(time.RFC3339), p.SeenAt.UTC().Format(time.RFC3339))
		}
	}
	if s.AllowPrivateAddresses {
		fmt.Fprintln(w, "warning: COURIER_ALLOW_PRIVATE_ADDRESSES=true: this server fetches from and delivers to loopback and private addresses")
	}
}

func renderEvents(w io.Writer, l EventList, hint string) {
	if len(l.Events) == 0 {
		fmt.Fprintln(w, "no events match")
		return
	}
	tw := newTable(w)
	row(tw, "ROW", "EVENT ID", "TYPE", "HOST", "STATUS", "ATTEMPTS", "AGE", "NEXT ATTEMPT", "LAST ERROR")
	for _, e := range l.Events {
		row(tw, num(e.RowID), cell(e.EventID), cell(e.Type), cell(e.Host), eventStatus(e),
			num(e.Attempts), age(time.Duration(e.AgeSeconds)*time.Second), ts(e.NextAttemptAt), cell(e.LastError))
	}
	_ = tw.Flush()
	if hint != "" {
		fmt.Fprintln(w, hint)
	}
}

func renderEvent(w io.Writer, d EventDetail) {
	e := d.Event
	tw := newTable(w)
	row(tw, "row", num(e.RowID))
	row(tw, "event id", cell(e.EventID))
	row(tw, "type", cell(e.Type))
	row(tw, "host", cell(e.Host))
	row(tw, "status", eventStatus(e))
	row(tw, "attempts", num(e.Attempts))
	row(tw, "next attempt", ts(e.NextAttemptAt))
	row(tw, "claimed at", ts(e.ClaimedAt))
	row(tw, "occurred at", ts(e.OccurredAt))
	row(tw, "enqueued at", ts(e.CreatedAt))
	row(tw, "updated at", ts(e.UpdatedAt))
	_ = tw.Flush()
	if e.LastError != "" {
		fmt.Fprintf(w, "last error:\n  %s\n", strings.ReplaceAll(strings.TrimSpace(e.LastError), "\n", "\n  "))
	}
	if len(e.Payload) > 0 {
		var buf bytes.Buffer
		if json.Indent(&buf, e.Payload, "  ", "  ") == nil {
			fmt.Fprintf(w, "payload:\n  %s\n", buf.String())
		}
	}
	fmt.Fprintln(w, "\nledger:")
	if len(d.Ledger) == 0 {
		fmt.Fprintln(w, "  no rows (no handler has finished this event or holds a claim on it)")
	} else {
		tw = newTable(w)
		row(tw, "  HANDLER", "STATUS", "STARTED", "PROCESSED")
		for _, l := range d.Ledger {
			row(tw, "  "+cell(l.Handler), l.Status, ts(l.StartedAt), ts(l.ProcessedAt))
		}
		_ = tw.Flush()
	}
	if len(d.DeliveryAttempts) > 0 {
		fmt.Fprintln(w, "\ndelivery attempts:")
		tw = newTable(w)
		row(tw, "  AT", "INBOX", "STATUS", "OUTCOME", "TOOK", "ERROR")
		for _, a := range d.DeliveryAttempts {
			took := "-"
			if a.DurationMS > 0 {
				took = (time.Duration(a.DurationMS) * time.Millisecond).String()
			}
			row(tw, "  "+ts(a.At), cell(a.Inbox), httpStatus(a.Status), cell(a.Outcome), took, cell(a.Error))
		}
		_ = tw.Flush()
	}
	if len(d.Exhausted) > 0 {
		fmt.Fprintln(w, "\njetstream exhausted:")
		renderExhaustedRows(w, d.Exhausted, "  ")
	}
}

func httpStatus(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func renderRetry(w io.Writer, r RetryResult) {
	if r.DryRun {
		fmt.Fprintf(w, "%d dead-lettered events match; nothing retried (dry run)\n", r.Matched)
	} else {
		fmt.Fprintf(w, "retried %d dead-lettered events (matched %d, skipped %d that changed meanwhile)\n",
			r.Retried, r.Matched, r.Skipped)
	}
	if r.NextCursor != "" {
		fmt.Fprintln(w, "more may match: run it again")
	}
}

func renderExhausted(w io.Writer, l ExhaustedList, hint string) {
	if len(l.Exhausted) == 0 {
		fmt.Fprintln(w, "no exhausted JetStream messages")
		return
	}
	renderExhaustedRows(w, l.Exhausted, "")
	if hint != "" {
		fmt.Fprintln(w, hint)
	}
}

func renderExhaustedRows(w io.Writer, list []Exhausted, indent string) {
	tw := newTable(w)
	row(tw, indent+"RECORD", "EVENT ID", "TYPE", "REASON", "DELIVERIES", "SEQ", "RECORDED", "REPLAYS", "DETAIL")
	for _, e := range list {
		detail := e.Detail
		switch {
		case !e.ReplayRequestedAt.IsZero():
			detail = "replay requested " + ts(e.ReplayRequestedAt)
		case e.ReplayError != "":
			detail = "replay failed: " + e.ReplayError
		}
		row(tw, indent+num(e.ID), cell(e.EventID), cell(e.EventType), e.Reason, num(e.Deliveries), num(e.StreamSeq),
			ts(e.RecordedAt), num(e.Replays), cell(detail))
	}
	_ = tw.Flush()
}

func renderActivity(w io.Writer, s ActivityStatus, hint string) {
	tw := newTable(w)
	row(tw, "activity", s.ActivityID)
	row(tw, "type", cell(s.Type))
	row(tw, "actor", s.Actor)
	row(tw, "published", ts(s.Published))
	if s.FanOut != nil {
		row(tw, "fan-out", status(s.FanOut.Status, s.FanOut.Stuck)+" (event "+s.FanOut.EventID+")")
	} else {
		row(tw, "fan-out", "- (event "+cell(s.EventID)+" no longer in the outbox)")
	}
	_ = tw.Flush()
	states := make([]string, 0, len(s.Summary))
	for st := range s.Summary {
		states = append(states, st)
	}
	sort.Strings(states)
	parts := make([]string, 0, len(states))
	for _, st := range states {
		parts = append(parts, fmt.Sprintf("%s %d", st, s.Summary[st]))
	}
	fmt.Fprintf(w, "\n%d inboxes on this page: %s\n", len(s.Inboxes), strings.Join(parts, ", "))
	if len(s.Inboxes) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	row(tw, "INBOX", "STATE", "ATTEMPTS", "LAST STATUS", "LAST ATTEMPT", "NEXT ATTEMPT", "WHY")
	for _, in := range s.Inboxes {
		when := in.NextAttemptAt
		if in.State == StateDelivered {
			when = time.Time{}
		}
		row(tw, in.Inbox, in.State, num(in.Attempts), httpStatus(in.LastStatus), ts(in.LastAttemptAt), ts(when),
			cell(in.LastError))
	}
	_ = tw.Flush()
	if hint != "" {
		fmt.Fprintln(w, hint)
	}
}

func hostState(h Host) string {
	if h.Paused {
		return h.State + " (paused)"
	}
	return h.State
}

func renderHosts(w io.Writer, l HostList, hint string) {
	if len(l.Hosts) == 0 {
		fmt.Fprintln(w, "no hosts")
		return
	}
	tw := newTable(w)
	row(tw, "HOST", "STATE", "FAILURES", "LAST SUCCESS", "PENDING", "PARKED", "DEAD", "LAST ERROR")
	for _, h := range l.Hosts {
		row(tw, h.Host, hostState(h), num(h.ConsecutiveFailures), ts(h.LastSuccessAt), num(h.Pending), num(h.Parked),
			num(h.DeadLettered), cell(h.LastError))
	}
	_ = tw.Flush()
	if hint != "" {
		fmt.Fprintln(w, hint)
	}
}

func renderHost(w io.Writer, h Host) {
	tw := newTable(w)
	row(tw, "host", h.Host)
	row(tw, "state", hostState(h))
	if h.Paused {
		row(tw, "paused at", ts(h.PausedAt))
		row(tw, "pause reason", cell(h.PauseReason))
	}
	row(tw, "consecutive failures", num(h.ConsecutiveFailures))
	row(tw, "first failure", ts(h.FirstFailureAt))
	row(tw, "last failure", ts(h.LastFailureAt))
	row(tw, "last success", ts(h.LastSuccessAt))
	row(tw, "unavailable since", ts(h.UnavailableSince))
	row(tw, "next probe", ts(h.NextProbeAt))
	row(tw, "last error", cell(h.LastError))
	row(tw, "pending deliveries", num(h.Pending))
	row(tw, "parked deliveries", num(h.Parked))
	row(tw, "dead-lettered deliveries", num(h.DeadLettered))
	_ = tw.Flush()
}

func renderBlocks(w io.Writer, l DomainBlockList) {
	if len(l.DomainBlocks) == 0 {
		fmt.Fprintln(w, "no blocked domains")
		return
	}
	tw := newTable(w)
	row(tw, "DOMAIN", "BLOCKED AT", "REASON")
	for _, b := range l.DomainBlocks {
		row(tw, b.Domain, ts(b.CreatedAt), cell(b.Reason))
	}
	_ = tw.Flush()
}

// actionLine is the one-line report of a state-changing action.
func actionLine(r ActionResult) string {
	subject := r.Host
	switch {
	case r.Domain != "":
		subject = r.Domain
	case r.EventID != "":
		subject = "event " + r.EventID
	case r.RowID != 0:
		subject = "row " + num(r.RowID)
	case r.RecordID != 0:
		subject = "record " + num(r.RecordID)
	}
	line := r.Action + " " + subject
	if r.Count != nil {
		line += fmt.Sprintf(": %d deliveries", *r.Count)
	}
	if r.Message != "" {
		line += ": " + r.Message
	}
	return line
}
