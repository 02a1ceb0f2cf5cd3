package store

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/courier-ap/courier/activitypub"
)

// TestAnswerFollow: a locked actor's Accept and Reject name the Follow by
// its id or by its follower; a Reject of an accepted follower removes it;
// each answer is enqueued to the follower with the Follow embedded.
func TestAnswerFollow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a, _, err := b.store.CreateActor(b.ctx, NewActor{Name: "alice", ManuallyApprovesFollowers: true})
	if err != nil {
		t.Fatal(err)
	}
	carl := "https://remote.test/users/carl"
	b.tx(t, func(tx *sql.Tx) error {
		for _, uri := range []string{remoteActor, carl} {
			if _, err := b.store.AddFollowerTx(b.ctx, tx, Follower{ActorID: a.ID, URI: uri, Inbox: uri + "/inbox",
				FollowActivityID: uri + "/follows/1", State: StatePending}); err != nil {
				return err
			}
		}
		return nil
	})
	if _, err := b.store.AnswerFollow(b.ctx, a, FollowRequest{FollowID: "https://remote.test/follows/none"}, "Accept"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown Follow: %v", err)
	}
	if _, err := b.store.AnswerFollow(b.ctx, a, FollowRequest{FollowID: remoteActor + "/follows/1", Follower: carl}, "Accept"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Follow and follower disagree: %v", err)
	}
	if _, err := b.store.AnswerFollow(b.ctx, a, FollowRequest{}, "Accept"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("nothing named: %v", err)
	}
	acc, err := b.store.AnswerFollow(b.ctx, a, FollowRequest{FollowID: remoteActor + "/follows/1"}, "Accept")
	if err != nil {
		t.Fatal(err)
	}
	b.checkOutgoing(t, acc, "Accept")
	p, _ := activitypub.ParseActivity(acc.Document)
	if p.Object.ID != remoteActor+"/follows/1" || p.Object.Actor != remoteActor || p.To[0] != remoteActor {
		t.Fatalf("Accept %s", acc.Document)
	}
	if ok, _ := b.store.IsFollower(b.ctx, a.ID, remoteActor); !ok {
		t.Fatal("the accepted follower is not a follower")
	}
	if _, err := b.store.AnswerFollow(b.ctx, a, FollowRequest{FollowID: remoteActor + "/follows/1"}, "Accept"); !errors.Is(err, ErrConflict) {
		t.Fatalf("accept twice: %v", err)
	}
	// A Reject of the accepted follower ends its follow.
	rej, err := b.store.AnswerFollow(b.ctx, a, FollowRequest{Follower: remoteActor}, "Reject")
	if err != nil {
		t.Fatal(err)
	}
	b.checkOutgoing(t, rej, "Reject")
	if ok, _ := b.store.IsFollower(b.ctx, a.ID, remoteActor); ok {
		t.Fatal("a rejected follower still follows")
	}
	if _, err := b.store.AnswerFollow(b.ctx, a, FollowRequest{Follower: remoteActor}, "Reject"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("reject twice: %v", err)
	}
	if _, total, _ := b.store.Followers(b.ctx, a.ID, StatePending, 0, 10); total != 1 {
		t.Fatalf("%d pending, want carl's", total)
	}
}
