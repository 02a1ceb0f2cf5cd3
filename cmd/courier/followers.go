package main

import (
	"context"
	"fmt"
	"io"

	"github.com/courier-ap/courier/store"
)

const followersUsage = "usage: courier actor followers NAME [--pending] | courier actor followers approve|reject NAME FOLLOWER"

// followersCommand lists a local actor's followers (accepted, or with
// --pending the requests awaiting approval), or approves or rejects one:
// `courier actor followers approve NAME FOLLOWER` accepts a pending
// Follow, `reject` refuses it or ends an accepted follower's follow; the
// Accept or Reject is delivered to the follower by a running courier.
func followersCommand(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	cfg, rest, err := parseConfigPrefix("actor followers", args, getenv)
	if err != nil {
		return usageError("%v", err)
	}
	action := ""
	pending := false
	var pos []string
	for _, a := range rest {
		switch {
		case a == "--pending" || a == "-pending":
			pending = true
		case len(a) > 1 && a[0] == '-':
			return usageError("actor followers: unknown flag %q; %s", a, followersUsage)
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) == 3 && (pos[0] == "approve" || pos[0] == "reject") {
		action, pos = pos[0], pos[1:]
	}
	switch {
	case action == "" && len(pos) != 1, action != "" && pending:
		return usageError("%s", followersUsage)
	}
	db, err := openDB(ctx, cfg, newLogger(io.Discard, "error"), false)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := recordedBase(ctx, db, &cfg, baseGiven(args, getenv)); err != nil {
		return err
	}
	if err := sameBase(ctx, db, cfg); err != nil {
		return err
	}
	st := store.New(db, cfg.base(), nil)
	actor, err := st.ActorByName(ctx, pos[0])
	if err != nil {
		return err
	}
	if action != "" {
		typ := map[string]string{"approve": "Accept", "reject": "Reject"}[action]
		act, err := st.AnswerFollow(ctx, actor, store.FollowRequest{Follower: pos[1]}, typ)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s of %s's follower %s: %s\n", typ, actor.Name, pos[1], act.URI)
		return nil
	}
	state := store.StateAccepted
	if pending {
		state = store.StatePending
	}
	for offset := 0; ; {
		page, total, err := st.Followers(ctx, actor.ID, state, offset, store.MaxPageSize)
		if err != nil {
			return err
		}
		for _, f := range page {
			fmt.Fprintf(stdout, "%s\t%s\t%s\n", f.URI, f.FollowActivityID, f.CreatedAt.Format("2006-01-02T15:04:05Z"))
		}
		offset += len(page)
		if len(page) == 0 || offset >= total {
			return nil
		}
	}
}
