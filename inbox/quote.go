package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/url"
	"strings"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/app"
	"github.com/courier-ap/courier/store"
)

// Quote consent (FEP-044f): a QuoteRequest of a local object is answered
// by the object's canQuote (store.ReceiveQuoteRequestTx); an Accept or
// Reject of a QuoteRequest a local quote sent updates that quote
// (store.AnswerQuoteRequestTx).

// Outcomes of quote consent (besides store.QuoteAccepted, QuotePending and
// QuoteRejected for a QuoteRequest received).
const (
	OutcomeQuoteApproved = "quote_approved" // a local quote's request accepted: quoteAuthorization set, Update enqueued
	OutcomeQuoteDenied   = "quote_denied"   // a local quote's request rejected
	OutcomeQuoteRevoked  = "quote_revoked"  // a local quote's stamp deleted: quoteAuthorization removed, Update enqueued
)

// instrument returns the id of an activity's instrument (a string, or an
// embedded object's id).
func instrument(act *activitypub.Activity) string {
	var d struct {
		Instrument json.RawMessage `json:"instrument"`
	}
	if json.Unmarshal(act.Raw, &d) != nil {
		return ""
	}
	ids := activitypub.IDs(d.Instrument)
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

// result returns the id of an activity's result.
func result(act *activitypub.Activity) string {
	var d struct {
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(act.Raw, &d) != nil {
		return ""
	}
	ids := activitypub.IDs(d.Result)
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

// quoteRequest answers an inbound QuoteRequest of a local object.
func (im *Importer) quoteRequest(ctx context.Context, tx *sql.Tx, eventID string, act *activitypub.Activity) (importOutcome, error) {
	q := instrument(act)
	if q == "" {
		return refused("a QuoteRequest needs its instrument (the quote)"), nil
	}
	if !sameHost(act.ID, act.Actor) || !sameHost(q, act.Actor) {
		return refused("the QuoteRequest or its quote is not on its actor's host"), nil
	}
	outcome, err := im.st.ReceiveQuoteRequestTx(ctx, tx, eventID, store.QuoteRequestIn{
		ID: act.ID, Actor: act.Actor, Object: act.ObjectID, Instrument: q,
	})
	if err != nil {
		return refusal(err, outcomeOf(OutcomeIgnored))
	}
	return outcomeOf(outcome), nil
}

// quoteAnswer applies an Accept or Reject of a QuoteRequest a local quote
// sent; ok is false when the activity answers no such request.
func (im *Importer) quoteAnswer(ctx context.Context, tx *sql.Tx, eventID string, act *activitypub.Activity) (importOutcome, bool, error) {
	if act.ObjectID == "" || !im.st.URIs().IsLocal(act.ObjectID) {
		return importOutcome{}, false, nil
	}
	approved, found, err := im.st.AnswerQuoteRequestTx(ctx, tx, eventID, act.ObjectID, act.Actor, act.Type, result(act))
	if err != nil {
		o, err := refusal(err, outcomeOf(OutcomeNoMatch))
		return o, true, err
	}
	if !found {
		return importOutcome{}, false, nil
	}
	if approved {
		return outcomeOf(OutcomeQuoteApproved), true, nil
	}
	return outcomeOf(OutcomeQuoteDenied), true, nil
}

// sameHost reports whether a and b are absolute URLs on one host.
func sameHost(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && ua.Host != "" && strings.EqualFold(ua.Host, ub.Host)
}

// quoteNotice is the local actor an imported activity's quote concerns
// and the kind of its notification: the quoted author of a new quote
// (approved or not, by quote: verifyQuote's verdict) or of a QuoteRequest
// (awaiting approval, or approved by policy), the quoter whose request was
// answered.
func (im *Importer) quoteNotice(ctx context.Context, tx *sql.Tx, act *activitypub.Activity, outcome, quote string) (string, string, error) {
	var kind string
	if quote != "" && act.Type == "Create" && outcome == OutcomeStored {
		quoted, _ := quotedBy(act.Object.Raw)
		o, err := im.st.ObjectByURITx(ctx, tx, quoted)
		if err != nil {
			return "", "", nil
		}
		if quote == quoteApproved {
			return o.AttributedTo, app.KindQuote, nil
		}
		return o.AttributedTo, app.KindQuoteUnapproved, nil
	}
	switch outcome {
	case store.QuotePending:
		kind = app.KindQuoteRequest
	case store.QuoteAccepted:
		kind = app.KindQuote
	case OutcomeQuoteApproved:
		kind = app.KindQuoteApproved
	case OutcomeQuoteDenied:
		kind = app.KindQuoteRejected
	case OutcomeQuoteRevoked:
		kind = app.KindQuoteRevoked
	default:
		return "", "", nil
	}
	uri := act.ObjectID // the quoted object
	if outcome == OutcomeQuoteRevoked {
		q, err := im.st.QuoteOfAuthorizationTx(ctx, tx, act.ObjectID)
		if err != nil {
			return "", "", err
		}
		uri = q
	}
	if outcome == OutcomeQuoteApproved || outcome == OutcomeQuoteDenied {
		q, err := im.st.QuoteOfRequestTx(ctx, tx, act.ObjectID)
		if err != nil {
			return "", "", err
		}
		uri = q
	}
	o, err := im.st.ObjectByURITx(ctx, tx, uri)
	if store.ErrorCode(err) == store.ENOTFOUND {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	return o.AttributedTo, kind, nil
}

// quoteKeys are the properties naming a quoted object, FEP-044f's first.
var quoteKeys = []string{"quote", "quoteUrl", "quoteUri", "_misskey_quote"}

// quotedBy returns the id of the object the object doc quotes, and its
// quoteAuthorization ("" when none).
func quotedBy(doc json.RawMessage) (quoted, stamp string) {
	var m map[string]json.RawMessage
	if json.Unmarshal(doc, &m) != nil {
		return "", ""
	}
	for _, k := range quoteKeys {
		if ids := activitypub.IDs(m[k]); len(ids) > 0 {
			quoted = ids[0]
			break
		}
	}
	if ids := activitypub.IDs(m["quoteAuthorization"]); len(ids) > 0 {
		stamp = ids[0]
	}
	return quoted, stamp
}

// Quote states of an inbound quote of a local object (prepared.quote).
const (
	quoteApproved   = "approved"
	quoteUnapproved = "unapproved"
)

// verifyQuote checks an inbound quote of a local object as Mastodon's
// VerifyQuoteService does: a self-quote is approved; otherwise its
// quoteAuthorization must be a QuoteAuthorization on the host of its
// attributedTo, which is the quoted object's author, whose
// interactingObject is the quote and interactionTarget the quoted object.
// courier's own stamps are read from the store; others are fetched. It
// returns "" when the object quotes nothing local.
func (im *Importer) verifyQuote(ctx context.Context, act *activitypub.Activity) string {
	o := act.Object
	if o == nil || (act.Type != "Create" && act.Type != "Update") {
		return ""
	}
	quoted, stamp := quotedBy(o.Raw)
	if quoted == "" || !im.st.URIs().IsLocal(quoted) {
		return ""
	}
	q, err := im.st.ObjectByURI(ctx, quoted)
	if err != nil || !q.Local() {
		return ""
	}
	author := q.AttributedTo
	if act.Actor == author {
		return quoteApproved
	}
	if stamp == "" {
		return quoteUnapproved
	}
	if id, ok := im.st.URIs().QuoteID(stamp); ok {
		st, err := im.st.StampByLocalID(ctx, id)
		if err == nil && st.State == "accepted" && st.QuoteURI == o.ID && st.ObjectID == q.RowID {
			return quoteApproved
		}
		return quoteUnapproved
	}
	f, ok := im.cfg.Resolver.(objectFetcher)
	if !ok {
		return quoteUnapproved
	}
	doc, err := f.Object(ctx, stamp)
	if err != nil {
		im.log.InfoContext(ctx, "inbox: quote authorization not fetched", "activity_id", act.ID, "err", err)
		return quoteUnapproved
	}
	var d struct {
		InteractingObject json.RawMessage `json:"interactingObject"`
		InteractionTarget json.RawMessage `json:"interactionTarget"`
	}
	if json.Unmarshal(doc.Raw, &d) != nil {
		return quoteUnapproved
	}
	first := func(raw json.RawMessage) string {
		if ids := activitypub.IDs(raw); len(ids) > 0 {
			return ids[0]
		}
		return ""
	}
	switch {
	case doc.Type != store.QuoteAuthorizationType, len(doc.AttributedTo) == 0,
		!sameHost(stamp, doc.AttributedTo[0]), first(d.InteractingObject) != o.ID,
		first(d.InteractionTarget) != quoted, doc.AttributedTo[0] != author:
		return quoteUnapproved
	}
	return quoteApproved
}
