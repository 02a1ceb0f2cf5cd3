package chaos

import (
	"strings"
	"testing"
)

// The convergence checker on arrival sequences written by hand: two hosts,
// one note of a local actor, a like of a remote note and a follow of a
// remote actor.
const (
	cvHostA  = "127.0.0.1:9001"
	cvHostB  = "127.0.0.1:9002"
	cvAlice  = "http://127.0.0.1:8080/users/alice"
	cvNote   = "http://127.0.0.1:8080/objects/n1"
	cvRemote = "http://127.0.0.1:9001/notes/r1"
	cvBob    = "http://127.0.0.1:9001/users/bob"
)

func noteArrival(host, typ, id string, version int) arrival {
	return arrival{host: host, typ: typ, id: id, actor: cvAlice, object: cvNote, version: version}
}

func undoArrival(host, id, undoneType, undoneID, undoneObject string) arrival {
	return arrival{host: host, typ: "Undo", id: id, actor: cvAlice, object: undoneID, version: -1,
		undoneType: undoneType, undoneObject: undoneObject}
}

// view is courier's state: the note at version (or deleted), a like of the
// remote note and a follow of bob standing or not.
func view(version int, deleted, liked, followed bool) *expectedView {
	w := newExpectedView([]string{cvHostA, cvHostB})
	w.objects[cvNote] = objectState{version: version, deleted: deleted}
	w.audience[cvNote] = []string{cvHostA, cvHostB}
	if liked {
		addRelation(w.likes, cvHostA, relation{cvAlice, cvRemote})
	}
	if followed {
		addRelation(w.follows, cvHostA, relation{cvAlice, cvBob})
	}
	return w
}

// cleanArrivals is a run in order: on both hosts the note's Create, two
// Updates, a duplicate of the second; on host A a Like, its Undo and a
// second Like, a Follow and its Undo.
func cleanArrivals() []arrival {
	var as []arrival
	for _, h := range []string{cvHostA, cvHostB} {
		as = append(as,
			noteArrival(h, "Create", "c", 0),
			noteArrival(h, "Update", "u1", 1),
			noteArrival(h, "Update", "u2", 2),
			noteArrival(h, "Update", "u2", 2))
	}
	return append(as,
		arrival{host: cvHostA, typ: "Like", id: "l1", actor: cvAlice, object: cvRemote, version: -1},
		undoArrival(cvHostA, "ul1", "Like", "l1", cvRemote),
		arrival{host: cvHostA, typ: "Like", id: "l2", actor: cvAlice, object: cvRemote, version: -1},
		arrival{host: cvHostA, typ: "Follow", id: "f1", actor: cvAlice, object: cvBob, version: -1},
		undoArrival(cvHostA, "uf1", "Follow", "f1", cvBob),
		// An activity outside the check (an Accept) is left alone.
		arrival{host: cvHostA, typ: "Accept", id: "a1", actor: cvAlice, object: "x", version: -1},
	)
}

func TestConvergenceCleanRun(t *testing.T) {
	c := checkConvergence(view(2, false, true, false), cleanArrivals())
	if c.Divergences() != 0 {
		t.Fatalf("a run in order: %d divergences: %v", c.Divergences(), c.First)
	}
	if c.Arrivals != 13 {
		t.Errorf("arrivals = %d, want 13", c.Arrivals)
	}
}

func TestConvergenceSupersededCreate(t *testing.T) {
	// Host A got the whole story, host B only the Delete: its Create and
	// Updates were superseded. Both converge on "no note".
	as := []arrival{
		noteArrival(cvHostA, "Create", "c", 0),
		noteArrival(cvHostA, "Update", "u1", 1),
		noteArrival(cvHostA, "Delete", "d", -1),
		noteArrival(cvHostB, "Delete", "d", -1),
	}
	c := checkConvergence(view(1, true, false, false), as)
	if c.Divergences() != 0 {
		t.Fatalf("a superseded Create: %d divergences: %v", c.Divergences(), c.First)
	}
}

func TestConvergenceResurrection(t *testing.T) {
	// Host B got the Delete before the Create: a receiver without
	// tombstones stores the note again and keeps it.
	as := []arrival{
		noteArrival(cvHostA, "Create", "c", 0),
		noteArrival(cvHostA, "Delete", "d", -1),
		noteArrival(cvHostB, "Delete", "d", -1),
		noteArrival(cvHostB, "Create", "c", 0),
	}
	c := checkConvergence(view(0, true, false, false), as)
	if c.Resurrected != 1 || c.ViewDivergences != 1 {
		t.Errorf("resurrected = %d, view divergences = %d, want 1 and 1", c.Resurrected, c.ViewDivergences)
	}
	if c.OrderViolations != 1 {
		t.Errorf("order violations = %d, want 1 (the Create after the Delete)", c.OrderViolations)
	}
	if !hasDescription(c.First, cvHostB+": Create of "+cvNote+" (v0) arrived after its Delete") ||
		!hasDescription(c.First, cvHostB+" holds "+cvNote+" (v0), which courier deleted") {
		t.Errorf("descriptions %q do not name the resurrection", c.First)
	}
}

func TestConvergenceLostEdit(t *testing.T) {
	// Host B got the Update before the Create: the receiver drops the
	// Update (no such object yet) and keeps v0, courier has v1.
	as := []arrival{
		noteArrival(cvHostA, "Create", "c", 0),
		noteArrival(cvHostA, "Update", "u1", 1),
		noteArrival(cvHostB, "Update", "u1", 1),
		noteArrival(cvHostB, "Create", "c", 0),
	}
	c := checkConvergence(view(1, false, false, false), as)
	if c.LostEdits != 1 || c.ViewDivergences != 1 {
		t.Errorf("lost edits = %d, view divergences = %d, want 1 and 1", c.LostEdits, c.ViewDivergences)
	}
	// The Update before the Create, and the Create (v0) after v1.
	if c.OrderViolations != 2 {
		t.Errorf("order violations = %d, want 2: %v", c.OrderViolations, c.First)
	}
	if !hasDescription(c.First, cvHostB+" holds "+cvNote+" at v0, courier at v1") {
		t.Errorf("descriptions %q do not name the lost edit", c.First)
	}
}

func TestConvergenceUpdatesOutOfOrder(t *testing.T) {
	// Both Updates arrive, the later one first: the final view holds v1.
	as := []arrival{
		noteArrival(cvHostA, "Create", "c", 0),
		noteArrival(cvHostA, "Update", "u2", 2),
		noteArrival(cvHostA, "Update", "u1", 1),
		noteArrival(cvHostB, "Create", "c", 0),
		noteArrival(cvHostB, "Update", "u1", 1),
		noteArrival(cvHostB, "Update", "u2", 2),
	}
	c := checkConvergence(view(2, false, false, false), as)
	if c.LostEdits != 1 || c.OrderViolations != 1 {
		t.Errorf("lost edits = %d, order violations = %d, want 1 and 1: %v", c.LostEdits, c.OrderViolations, c.First)
	}
}

func TestConvergenceMissingObject(t *testing.T) {
	// Host B never got the note courier still has.
	as := []arrival{noteArrival(cvHostA, "Create", "c", 0)}
	c := checkConvergence(view(0, false, false, false), as)
	if c.Missing != 1 || c.Divergences() != 1 {
		t.Errorf("missing = %d, divergences = %d, want 1 and 1: %v", c.Missing, c.Divergences(), c.First)
	}
}

func TestConvergenceUndoBeforeItsActivity(t *testing.T) {
	// The Undo of the Like and of the Follow arrive first: the receiver
	// ignores them and then keeps the Like and the Follow courier took
	// back.
	as := []arrival{
		noteArrival(cvHostA, "Create", "c", 0),
		noteArrival(cvHostB, "Create", "c", 0),
		undoArrival(cvHostA, "ul1", "Like", "l1", cvRemote),
		arrival{host: cvHostA, typ: "Like", id: "l1", actor: cvAlice, object: cvRemote, version: -1},
		undoArrival(cvHostA, "uf1", "Follow", "f1", cvBob),
		arrival{host: cvHostA, typ: "Follow", id: "f1", actor: cvAlice, object: cvBob, version: -1},
	}
	c := checkConvergence(view(0, false, false, false), as)
	if c.Relations != 2 || c.ViewDivergences != 2 {
		t.Errorf("relations = %d, view divergences = %d, want 2 and 2: %v", c.Relations, c.ViewDivergences, c.First)
	}
	// Each Undo before its activity, each activity after its Undo.
	if c.OrderViolations != 4 {
		t.Errorf("order violations = %d, want 4: %v", c.OrderViolations, c.First)
	}
}

func TestConvergenceLostRelation(t *testing.T) {
	// Courier's like and follow stand but host A never got them.
	as := []arrival{noteArrival(cvHostA, "Create", "c", 0), noteArrival(cvHostB, "Create", "c", 0)}
	c := checkConvergence(view(0, false, true, true), as)
	if c.Relations != 2 || c.OrderViolations != 0 {
		t.Errorf("relations = %d, order violations = %d, want 2 and 0: %v", c.Relations, c.OrderViolations, c.First)
	}
}

func TestConvergenceDescriptionsBounded(t *testing.T) {
	var as []arrival
	for range 20 {
		as = append(as, noteArrival(cvHostA, "Update", "u1", 1))
	}
	c := checkConvergence(view(1, false, false, false), as)
	if c.OrderViolations != 20 || len(c.First) != maxDescribed+2 {
		t.Errorf("order violations = %d, described = %d, want 20 and %d (and the note missing on both hosts)", c.OrderViolations, len(c.First), maxDescribed+2)
	}
}

func TestContentVersion(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    int
	}{
		{convergeContent(7, 0), 0},
		{convergeContent(7, 12), 12},
		{"<p>chaos note 3 by local0</p>", -1},
	} {
		if got := contentVersion(tc.content); got != tc.want {
			t.Errorf("contentVersion(%q) = %d, want %d", tc.content, got, tc.want)
		}
	}
}

func hasDescription(first []string, want string) bool {
	for _, f := range first {
		if strings.Contains(f, want) {
			return true
		}
	}
	return false
}

func TestConvergerPlan(t *testing.T) {
	actors := []*localActor{{name: "a", id: "http://l/users/a"}, {name: "b", id: "http://l/users/b"}}
	var remotes []*remoteActor
	for _, id := range []string{"http://r/users/x", "http://r/users/y", "http://r/users/z"} {
		remotes = append(remotes, &remoteActor{id: id})
	}
	c := newConverger("http://l", actors, remotes, 40, 1, nil, nil)
	kinds := map[storyKind]int{}
	objects := map[int]bool{}
	pairs := map[relation]bool{}
	for _, s := range c.plan() {
		kinds[s.kind]++
		switch s.kind {
		case storyObject:
			objects[s.n] = true
		case storyFollow:
			k := relation{s.actor.id, s.target.id}
			if pairs[k] {
				t.Errorf("two follow stories on %v: they would undo each other's follows", k)
			}
			pairs[k] = true
		}
	}
	// 40 objects, 20 like stories, and 10 follow stories capped at the 6
	// (local, remote) pairs.
	if kinds[storyObject] != 40 || len(objects) != 40 || kinds[storyLike] != 20 || kinds[storyFollow] != 6 {
		t.Errorf("plan: %d object stories (%d distinct), %d like, %d follow; want 40 (40), 20, 6",
			kinds[storyObject], len(objects), kinds[storyLike], kinds[storyFollow])
	}
}
