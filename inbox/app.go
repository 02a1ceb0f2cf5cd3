package inbox

import (
	"context"
	"database/sql"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/app"
	"github.com/courier-ap/courier/store"
)

// recordApp records the activity act, imported in tx with outcome, in the
// inbox views of the local actors it concerns (Config.App). What the import
// refused, and an older version of an object than the one kept, is not
// recorded.
func (im *Importer) recordApp(ctx context.Context, tx *sql.Tx, act *activitypub.Activity, outcome importOutcome, quote string) error {
	if im.cfg.App == nil || outcome.Refused() || outcome.kind == OutcomeStale {
		return nil
	}
	imp := app.Imported{Activity: act}
	switch outcome.kind {
	case OutcomeFollowed:
		imp.Follow = store.StateAccepted
	case OutcomePending:
		imp.Follow = store.StatePending
	}
	var err error
	if imp.QuoteActor, imp.QuoteKind, err = im.quoteNotice(ctx, tx, act, outcome.kind, quote); err != nil { // quote.go
		return err
	}
	_, err = im.cfg.App.RecordActivityTx(ctx, tx, imp)
	return err
}
