package chaos

import (
	"context"
	"testing"
)

// TestReadExpected writes courier's state by hand in a real migrated
// database and checks the view every host should have, then the checker
// against it.
func TestReadExpected(t *testing.T) {
	t.Parallel()
	path, db := migratedDB(t)
	const (
		base = "http://127.0.0.1:9"
		h1   = "127.0.0.1:1001"
		h2   = "127.0.0.1:1002"
	)
	local := base + "/users/local0"
	obj := func(n string) string { return base + "/objects/" + n }
	remoteNote := "http://" + h1 + "/notes/r1"
	bob := "http://" + h2 + "/users/bob"

	mustExec(t, db, `INSERT INTO actors (id, name, private_key_pem, public_key_pem, token_hash, created_at, updated_at)
		VALUES (1, 'local0', 'k', 'p', 'h', 0, 0)`)
	// n1 at v3, n2 deleted (its content cleared), n3 not a convergence
	// object, r1 a remote note.
	mustExec(t, db, `INSERT INTO objects (uri, type, attributed_to, actor_id, content, visibility, published_at, deleted_at, document, created_at, modified_at)
		VALUES (?, 'Note', ?, 1, ?, 'public', 0, NULL, '{}', 0, 0),
		       (?, 'Note', ?, 1, '', 'public', 0, 5, '{}', 0, 0),
		       (?, 'Note', ?, 1, '<p>chaos note 1 by local0</p>', 'public', 0, NULL, '{}', 0, 0),
		       (?, 'Note', ?, NULL, '<p>remote</p>', 'public', 0, NULL, '{}', 0, 0)`,
		obj("n1"), local, convergeContent(1, 3), obj("n2"), local, obj("n3"), local, remoteNote, "http://"+h1+"/users/amy")
	// A Like of r1 addressed to its author on h1, a Like of a note courier
	// did not know (addressed to no one: the fan-out finds its author, on
	// the note's host), a Follow of bob on h2.
	mustExec(t, db, `INSERT INTO activities (uri, actor_uri, actor_id, type, object_uri, document, published_at, created_at)
		VALUES (?, ?, 1, 'Like', ?, ?, 0, 0), (?, ?, 1, 'Like', 'http://127.0.0.1:1003/notes/x', '{"to":[]}', 0, 0),
		       (?, ?, 1, 'Follow', ?, ?, 0, 0)`,
		base+"/activities/l1", local, remoteNote, `{"to":["http://`+h1+`/users/amy"]}`,
		base+"/activities/l2", local,
		base+"/activities/f1", local, bob, `{"to":["`+bob+`"]}`)
	mustExec(t, db, `INSERT INTO reactions (activity_uri, type, actor_uri, object_uri, created_at)
		VALUES (?, 'Like', ?, ?, 0), (?, 'Like', ?, 'http://127.0.0.1:1003/notes/x', 0)`,
		base+"/activities/l1", local, remoteNote, base+"/activities/l2", local)
	mustExec(t, db, `INSERT INTO following (actor_id, target_uri, follow_activity_id, state, created_at, updated_at)
		VALUES (1, ?, ?, 'pending', 0, 0)`, bob, base+"/activities/f1")

	w := newWorld("db", "none")
	w.addFollow(follow{id: "f1", host: h1, local: local})
	w.addFollow(follow{id: "f2", host: h2, local: local})
	ro, err := openReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	want, err := readExpected(context.Background(), ro, w, []string{h1, h2})
	if err != nil {
		t.Fatal(err)
	}
	if len(want.objects) != 2 || want.objects[obj("n1")] != (objectState{version: 3}) || !want.objects[obj("n2")].deleted {
		t.Errorf("objects = %+v, want n1 at v3 and n2 deleted", want.objects)
	}
	if len(want.audience[obj("n1")]) != 2 {
		t.Errorf("audience of n1 = %v, want both hosts", want.audience[obj("n1")])
	}
	x := "http://127.0.0.1:1003/notes/x"
	if !want.likes[h1][relation{local, remoteNote}] || len(want.likes[h1]) != 1 ||
		!want.likes["127.0.0.1:1003"][relation{local, x}] || len(want.likes) != 2 {
		t.Errorf("likes = %v, want the Like of r1 at %s and of x at the note's host", want.likes, h1)
	}
	if !want.follows[h2][relation{local, bob}] || len(want.follows) != 1 {
		t.Errorf("follows = %v, want the Follow of bob at %s", want.follows, h2)
	}

	// Hosts that got everything in order converge; one that lacks the
	// last Update does not.
	var as []arrival
	for _, h := range []string{h1, h2} {
		as = append(as,
			arrival{host: h, typ: "Create", id: "c1", actor: local, object: obj("n1"), version: 0},
			arrival{host: h, typ: "Update", id: "u3", actor: local, object: obj("n1"), version: 3},
			arrival{host: h, typ: "Delete", id: "d2", actor: local, object: obj("n2"), version: -1})
	}
	as = append(as,
		arrival{host: h1, typ: "Like", id: base + "/activities/l1", actor: local, object: remoteNote, version: -1},
		arrival{host: h2, typ: "Follow", id: base + "/activities/f1", actor: local, object: bob, version: -1})
	if c := checkConvergence(want, as); c.Divergences() != 0 {
		t.Errorf("a run in order: %d divergences: %v", c.Divergences(), c.First)
	}
	as[1].version = 2
	if c := checkConvergence(want, as); c.LostEdits != 1 || c.Divergences() != 1 {
		t.Errorf("a host at v2: lost edits %d, divergences %d, want 1 and 1: %v", c.LostEdits, c.Divergences(), c.First)
	}
}

// TestEvaluateSupersededCreate: the Create of a deleted object is not a
// pair that must arrive (it is superseded by the Delete), and Updates of
// one object are distinct activities, not one activity rebuilt.
func TestEvaluateSupersededCreate(t *testing.T) {
	t.Parallel()
	path, db := migratedDB(t)
	const (
		base = "http://127.0.0.1:9"
		h1   = "127.0.0.1:1001"
	)
	local := base + "/users/local0"
	act := func(n string) string { return base + "/activities/" + n }
	mustExec(t, db, `INSERT INTO actors (id, name, private_key_pem, public_key_pem, token_hash, created_at, updated_at)
		VALUES (1, 'local0', 'k', 'p', 'h', 0, 0)`)
	mustExec(t, db, `INSERT INTO activities (uri, actor_uri, actor_id, type, object_uri, document, published_at, withdrawn_at, created_at)
		VALUES (?, ?, 1, 'Create', ?, '{}', 0, NULL, 0), (?, ?, 1, 'Create', ?, '{}', 0, 7, 0),
		       (?, ?, 1, 'Update', ?, '{}', 0, NULL, 0), (?, ?, 1, 'Update', ?, '{}', 0, NULL, 0)`,
		act("c1"), local, base+"/objects/n1", act("c2"), local, base+"/objects/n2",
		act("u1"), local, base+"/objects/n1", act("u2"), local, base+"/objects/n1")
	w := newWorld("db", "none")
	w.addFollow(follow{id: "f1", host: h1, local: local})
	posts := []post{
		{activityID: act("c1"), typ: "Create", objectID: base + "/objects/n1", host: h1},
		{activityID: act("u1"), typ: "Update", objectID: base + "/objects/n1", host: h1},
		{activityID: act("u2"), typ: "Update", objectID: base + "/objects/n1", host: h1},
	}
	ro, err := openReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	s, err := read(context.Background(), ro, "none")
	if err != nil {
		t.Fatal(err)
	}
	r := evaluate(w, s, posts, writeStats{}, nil, 0).report
	if r.PairsExpected != 1 || r.PairsLost != 0 {
		t.Errorf("pairs expected %d, lost %d; want 1 and 0 (the deleted object's Create is not owed)", r.PairsExpected, r.PairsLost)
	}
	if r.MaxIDsPerPair != 1 {
		t.Errorf("max ids per pair = %d, want 1 (two Updates are two activities)", r.MaxIDsPerPair)
	}
}
