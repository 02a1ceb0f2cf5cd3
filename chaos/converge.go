package chaos

import (
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strconv"
)

// The convergence check. Each remote host is a naive receiver without
// tombstones: it applies the activities it accepted in the order they
// arrived (a Create stores the object, an Update replaces it when it exists
// and is dropped otherwise, a Delete removes it, a Like or a Follow stands
// until an Undo of it arrives). Its final view must equal courier's own
// state: the last version of every object it should have, no deleted
// object, the same likes and follows. Beside that final view, the order of
// arrivals of each (object, inbox) is checked: no Update before the
// object's Create, nothing of the object after its Delete (a Delete without
// the Create is fine: the Create was superseded), versions in the order
// written, no Like or Follow after its Undo and no Undo before it.

// versionPattern finds the version a convergence write puts in an object's
// content: "converge <n> v<version>".
var versionPattern = regexp.MustCompile(`converge (\d+) v(\d+)`)

// convergeContent is the content of version v of the run's object n.
func convergeContent(n, v int) string {
	return fmt.Sprintf("<p>converge %d v%d</p>", n, v)
}

// contentVersion returns the version written in content, or -1.
func contentVersion(content string) int {
	m := versionPattern.FindStringSubmatch(content)
	if m == nil {
		return -1
	}
	v, err := strconv.Atoi(m[2])
	if err != nil {
		return -1
	}
	return v
}

// arrival is one activity a remote inbox accepted, in arrival order.
type arrival struct {
	host   string // host:port of the inbox
	typ    string // Create, Update, Delete, Like, Follow, Undo (others are ignored)
	id     string // the activity's id
	actor  string
	object string // the object created, updated, deleted, liked or followed; the undone activity's id
	// version is the object's version for a Create or Update (-1 unknown).
	version int
	// undoneType and undoneObject are, for an Undo, the type and the
	// object of the activity it embeds.
	undoneType, undoneObject string
}

// relation is a like or a follow: actor's of object (a note, an actor).
type relation struct{ actor, object string }

// expectedView is courier's state as every remote host should see it.
type expectedView struct {
	// hosts are the hosts whose views are checked.
	hosts []string
	// objects are the objects the run wrote, by id: their last version in
	// courier's database, or deleted; audience the hosts that should have
	// them.
	objects  map[string]objectState
	audience map[string][]string
	// likes and follows stand in courier's database, by the host the
	// activity is addressed to.
	likes, follows map[string]map[relation]bool
}

// objectState is one object as courier has it.
type objectState struct {
	version int
	deleted bool
}

func newExpectedView(hosts []string) *expectedView {
	return &expectedView{hosts: hosts, objects: map[string]objectState{}, audience: map[string][]string{},
		likes: map[string]map[relation]bool{}, follows: map[string]map[relation]bool{}}
}

func addRelation(m map[string]map[relation]bool, host string, r relation) {
	if m[host] == nil {
		m[host] = map[relation]bool{}
	}
	m[host][r] = true
}

// convergence is the outcome of the check.
type convergence struct {
	// Arrivals counts the activities the checked hosts accepted that the
	// check applied.
	Arrivals int
	// ViewDivergences counts differences between a host's final view and
	// courier's state; OrderViolations arrivals out of order.
	ViewDivergences, OrderViolations int
	// Resurrected, LostEdits and Missing break ViewDivergences of objects
	// down: deleted in courier but held by a host, held at an older (or
	// other) version, never held; Relations counts the likes and follows
	// that differ.
	Resurrected, LostEdits, Missing, Relations int
	// First describes the first few divergences of each kind (order of an
	// object's arrivals, order of a like's or follow's, resurrected, lost
	// edit, missing, relation).
	First []string

	described map[string]int
}

// maxDescribed bounds the descriptions of each kind in convergence.First.
const maxDescribed = 3

func (c *convergence) note(kind, format string, args ...any) {
	if c.described == nil {
		c.described = map[string]int{}
	}
	if c.described[kind] < maxDescribed {
		c.described[kind]++
		c.First = append(c.First, fmt.Sprintf(format, args...))
	}
}

// Divergences is the total count: view divergences and order violations.
func (c *convergence) Divergences() int { return c.ViewDivergences + c.OrderViolations }

// hostOf returns the host:port of an id URL.
func hostOf(id string) string {
	u, err := url.Parse(id)
	if err != nil {
		return ""
	}
	return u.Host
}

// orderState is what one (object, inbox) has seen so far.
type orderState struct {
	created, deleted bool
	version          int
}

// checkConvergence applies arrivals (in arrival order) host by host as a
// naive receiver would and compares each final view with want.
func checkConvergence(want *expectedView, arrivals []arrival) convergence {
	var c convergence
	checked := map[string]bool{}
	for _, h := range want.hosts {
		checked[h] = true
	}
	type objKey struct{ host, object string }
	type relKey struct {
		host string
		rel  relation
	}
	objects := map[objKey]int{}  // the host's view: object -> version held
	likes := map[relKey]string{} // the host's view: relation -> the standing activity
	follows := map[relKey]string{}
	order := map[objKey]*orderState{}
	arrived := map[[2]string]bool{} // (host, activity id) of Likes and Follows
	undone := map[[2]string]bool{}  // (host, activity id) of Likes and Follows an Undo took back
	for _, a := range arrivals {
		if !checked[a.host] {
			continue
		}
		switch a.typ {
		case "Create", "Update", "Delete":
			if _, ok := want.objects[a.object]; !ok {
				continue // not an object of the convergence writes
			}
			c.Arrivals++
			k := objKey{a.host, a.object}
			st := order[k]
			if st == nil {
				st = &orderState{version: -1}
				order[k] = st
			}
			switch a.typ {
			case "Create":
				if st.deleted {
					c.OrderViolations++
					c.note("order", "%s: Create of %s (v%d) arrived after its Delete", a.host, a.object, a.version)
				} else if a.version < st.version {
					c.OrderViolations++
					c.note("order", "%s: Create of %s (v%d) arrived after v%d", a.host, a.object, a.version, st.version)
				}
				st.created = true
				objects[k] = a.version
			case "Update":
				switch {
				case !st.created:
					c.OrderViolations++
					c.note("order", "%s: Update of %s (v%d) arrived before its Create", a.host, a.object, a.version)
				case st.deleted:
					c.OrderViolations++
					c.note("order", "%s: Update of %s (v%d) arrived after its Delete", a.host, a.object, a.version)
				case a.version < st.version:
					c.OrderViolations++
					c.note("order", "%s: Update of %s to v%d arrived after v%d", a.host, a.object, a.version, st.version)
				}
				if _, ok := objects[k]; ok {
					objects[k] = a.version
				}
			case "Delete":
				st.deleted = true
				delete(objects, k)
			}
			if a.typ != "Delete" {
				st.version = max(st.version, a.version)
			}
		case "Like", "Follow":
			c.Arrivals++
			id := [2]string{a.host, a.id}
			if undone[id] {
				c.OrderViolations++
				c.note("relation order", "%s: %s %s of %s arrived after its Undo", a.host, a.typ, a.id, a.object)
			}
			arrived[id] = true
			m := likes
			if a.typ == "Follow" {
				m = follows
			}
			m[relKey{a.host, relation{a.actor, a.object}}] = a.id
		case "Undo":
			if a.undoneType != "Like" && a.undoneType != "Follow" {
				continue
			}
			c.Arrivals++
			id := [2]string{a.host, a.object}
			if !arrived[id] {
				c.OrderViolations++
				c.note("relation order", "%s: Undo of %s %s arrived before it", a.host, a.undoneType, a.object)
			}
			undone[id] = true
			m := likes
			if a.undoneType == "Follow" {
				m = follows
			}
			// A naive receiver takes back the relation the Undo names,
			// whichever activity made it.
			delete(m, relKey{a.host, relation{a.actor, a.undoneObject}})
		}
	}

	// Final views against courier's state, in a stable order.
	ids := make([]string, 0, len(want.objects))
	for id := range want.objects {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		st := want.objects[id]
		for _, h := range want.audience[id] {
			if !checked[h] {
				continue
			}
			v, held := objects[objKey{h, id}]
			switch {
			case st.deleted && held:
				c.ViewDivergences++
				c.Resurrected++
				c.note("resurrected", "%s holds %s (v%d), which courier deleted", h, id, v)
			case st.deleted:
			case !held:
				c.ViewDivergences++
				c.Missing++
				c.note("missing", "%s does not hold %s (courier has v%d)", h, id, st.version)
			case v != st.version:
				c.ViewDivergences++
				c.LostEdits++
				c.note("lost edit", "%s holds %s at v%d, courier at v%d", h, id, v, st.version)
			}
		}
	}
	for _, kind := range []struct {
		name string
		want map[string]map[relation]bool
		got  map[relKey]string
	}{{"Like", want.likes, likes}, {"Follow", want.follows, follows}} {
		var diffs []string
		for _, h := range want.hosts {
			for r := range kind.want[h] {
				if _, ok := kind.got[relKey{h, r}]; !ok {
					diffs = append(diffs, fmt.Sprintf("%s lacks the %s of %s by %s, which stands in courier", h, kind.name, r.object, r.actor))
				}
			}
		}
		for k := range kind.got {
			if !kind.want[k.host][k.rel] {
				diffs = append(diffs, fmt.Sprintf("%s holds a %s of %s by %s, which courier took back", k.host, kind.name, k.rel.object, k.rel.actor))
			}
		}
		sort.Strings(diffs)
		for _, d := range diffs {
			c.ViewDivergences++
			c.Relations++
			c.note("relation", "%s", d)
		}
	}
	return c
}
