package interop

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const publicCollection = "https://www.w3.org/ns/activitystreams#Public"

// TestFedifyPeer runs courier against the Fedify peer, both ways:
//
//   - the peer looks up a courier actor by its URL and by WebFinger (over
//     https: courier's origin is a TLS proxy whose certificate the peer
//     trusts), reads courier's NodeInfo, note, activity and collections,
//     follows the actor and gets the Accept, then receives the Create, the
//     Update and the Delete of a note courier's actor posts, the actor's own
//     Update, a Follow (which it accepts) and a Like, each verified by Fedify
//     (inbox listeners fire only for verified activities) and checked once
//     more by the peer's own verifyRequest call;
//   - the peer's actor posts a Create (public, followers-only through
//     Fedify's fan-out, direct), an Update and a Delete of a note, a Like, an
//     Announce and Undos, signed by Fedify (with its Linked Data Signature
//     and Object Integrity Proof in the body, ids in the forms Fedify
//     applications use, to the personal or the shared inbox), also after it
//     rotates its key; courier verifies and imports them, as seen in its
//     database and its collections' totalItems;
//   - integrity proofs (FEP-8b32, eddsa-jcs-2022) both ways: Fedify's
//     verifyObject verifies the proof of an activity courier delivers, and
//     courier imports the peer's proved Create and refuses (401) a copy of
//     it whose content was changed under a valid HTTP signature;
//   - quote consent (FEP-044f, Fedify 2.x): courier answers the peer's
//     QuoteRequest with an Accept whose result, the QuoteAuthorization
//     stamp, the peer then looks up;
//   - inbox forwarding: a second Fedify server replies, with a proof, to
//     a public note of courier's actor, and the peer (a follower of that
//     actor) receives the reply from courier, byte for byte as sent, with
//     the proof verifying;
//   - the peer goes down while courier delivers to it, and gets the activity
//     once it is back, once.
//
// Steps run in order; a step whose prerequisite failed is skipped rather
// than left to time out.
func TestFedifyPeer(t *testing.T) {
	t.Parallel()
	runFedifyPeer(t, peerDirectory())
}

// TestFedify2Peer runs the same scenario against the same peer on the
// Fedify 2.x line (interop/fedify2), which signs with RFC 9421 first and
// verifies it. Beyond what TestFedifyPeer checks: every inbox POST the
// peer sent courier was RFC 9421 and none was answered 401 (Fedify's first
// knock is accepted, no draft-cavage retry), and courier, having learnt
// that the peer's host speaks RFC 9421, delivered to it with RFC 9421,
// verified by Fedify.
func TestFedify2Peer(t *testing.T) {
	t.Parallel()
	runFedifyPeer(t, peer2Dir)
}

func runFedifyPeer(t *testing.T, peerDir string) {
	node := prerequisites(t, peerDir)
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)

	bin := courierBinary(t)
	built := time.Now()
	dir := t.TempDir()
	c := startCourier(t, ctx, bin, dir)
	actor, token := c.createActor(t, ctx, "alice")
	peerOpts := peerOptions{caFile: c.caFile, keysFile: filepath.Join(dir, "peer-keys.json"), name: "fedify peer", dir: peerDir}
	p := startPeer(t, t, ctx, node, peerOpts)
	t.Logf("courier %s (actor %s) and the peer %s (%s) are up in %s (courier built in %s)",
		c.origin, actor, p.origin, p.software, time.Since(built).Round(time.Millisecond), built.Sub(started).Round(time.Millisecond))
	proxyHost := strings.TrimPrefix(c.origin, "https://")
	owner := t // the processes belong to the test, not to the step that restarts the peer

	var (
		note       string // the note courier's actor posts
		question   string // the Question courier's actor posts
		noteCreate string // its Create
		peerNote   string // the note the peer's actor posts
		peerFollow string // the peer's Follow of courier's actor
		peerLike   string // the peer's Like of note

		peers = []*peer{p} // every peer process started, the current one last
		// refused holds the digest headers of the peer's POSTs courier
		// must refuse (401): tampered copies.
		refused = map[string]bool{}
	)
	steps := []step{
		{name: "lookup", title: "peer looks up the courier actor by its URL", run: func(t *testing.T) {
			var got lookupResult
			if err := p.control(ctx, "lookup", map[string]string{"target": actor}, &got); err != nil {
				t.Fatal(err)
			}
			checkActor(t, got, actor, c.origin)
		}},
		{name: "webfinger", title: "peer finds the courier actor by WebFinger over https", run: func(t *testing.T) {
			for _, handle := range []string{"@alice@" + proxyHost, "acct:alice@" + proxyHost} {
				var got lookupResult
				if err := p.control(ctx, "lookup", map[string]string{"target": handle}, &got); err != nil {
					t.Fatalf("%s: %v", handle, err)
				}
				checkActor(t, got, actor, c.origin)
			}
		}},
		{name: "nodeinfo", title: "peer reads courier's NodeInfo, parsed strictly", run: func(t *testing.T) {
			var got struct {
				Software struct {
					Name    string `json:"name"`
					Version string `json:"version"`
				} `json:"software"`
				Protocols []string `json:"protocols"`
				Usage     struct {
					Users struct {
						Total *int `json:"total"`
					} `json:"users"`
				} `json:"usage"`
			}
			if err := p.control(ctx, "nodeinfo", map[string]string{"target": c.origin}, &got); err != nil {
				t.Fatal(err)
			}
			if got.Software.Name != "courier" || got.Software.Version == "" || !slices.Contains(got.Protocols, "activitypub") {
				t.Errorf("the peer reads courier's NodeInfo as %+v, want software courier speaking activitypub", got)
			}
			if got.Usage.Users.Total == nil || *got.Usage.Users.Total != 1 {
				t.Errorf("the peer reads courier's user count as %v, want 1", got.Usage.Users.Total)
			}
		}},
		{name: "follow", needs: []string{"lookup"}, title: "peer follows and receives the Accept", run: func(t *testing.T) {
			var follow sentActivity
			if err := p.control(ctx, "follow", map[string]string{"target": actor}, &follow); err != nil {
				t.Fatal(err)
			}
			accept, err := p.wait(stepTimeout, func(e peerEvent) bool {
				return e.Event == "received" && e.Type == "Accept" && e.Actor == actor
			})
			if err != nil {
				t.Fatalf("Accept of the Follow %s: %v", follow.ID, err)
			}
			if accept.ObjectID != follow.ID {
				t.Errorf("the Accept is of %s, want of the Follow %s", accept.ObjectID, follow.ID)
			}
			checkDelivery(t, p, accept.ID, actor)
			if err := eventually(ctx, func() error { return collectionLists(ctx, c, "/users/alice/followers", p.actor) }); err != nil {
				t.Fatal(err)
			}
			peerFollow = follow.ID
		}},
		{name: "create", needs: []string{"follow"}, title: "peer receives the Create of a note", run: func(t *testing.T) {
			content := "Hello from courier to Fedify"
			act := c2s(t, ctx, c, token, map[string]any{
				"@context": "https://www.w3.org/ns/activitystreams",
				"type":     "Note",
				"content":  content,
				"to":       []string{publicCollection},
				"cc":       []string{actor + "/followers"},
			})
			got := receivedAbout(t, p, "Create", act.id)
			checkDelivery(t, p, act.id, actor)
			if got.Object == nil || got.Object.ID != act.objectID {
				t.Fatalf("the Create carries %+v, want the note %s", got.Object, act.objectID)
			}
			if got.Object.Type != "Note" || !strings.Contains(got.Object.Content, content) || got.Object.AttributedTo != actor {
				t.Errorf("the peer read the note as %+v, want a Note by %s with %q", *got.Object, actor, content)
			}
			if !slices.Contains(got.Object.To, publicCollection) {
				t.Errorf("the peer reads the note's audience as to=%v cc=%v, want it public", got.Object.To, got.Object.Cc)
			}
			note, noteCreate = act.objectID, act.id
		}},
		{name: "lookup-note", needs: []string{"create"}, title: "peer looks up the note (unsigned and signed GET) and its Create", run: func(t *testing.T) {
			for _, signed := range []bool{false, true} {
				var got lookupResult
				if err := p.control(ctx, "lookup", map[string]any{"target": note, "signed": signed}, &got); err != nil {
					t.Fatalf("signed=%v: %v", signed, err)
				}
				if got.ID != note || got.Type != "Note" || got.AttributedTo != actor || got.Content == "" {
					t.Errorf("the peer reads %s (signed=%v) as %+v, want a Note by %s", note, signed, got, actor)
				}
			}
			var create lookupResult
			if err := p.control(ctx, "lookup", map[string]string{"target": noteCreate}, &create); err != nil {
				t.Fatal(err)
			}
			if create.ID != noteCreate || create.Type != "Create" || create.Actor != actor || create.Object != note {
				t.Errorf("the peer reads %s as %+v, want the Create of %s by %s", noteCreate, create, note, actor)
			}
		}},
		{name: "content", needs: []string{"follow"}, title: "peer reads a note's Mention, Hashtag and Image attachment", run: func(t *testing.T) {
			peerHost := strings.TrimPrefix(p.origin, "http://")
			act := c2s(t, ctx, c, token, map[string]any{
				"@context": "https://www.w3.org/ns/activitystreams",
				"type":     "Note",
				"content":  `<p>@peer look #Courier</p>`,
				"to":       []string{publicCollection},
				"cc":       []string{actor + "/followers"},
				"tag": []any{
					map[string]any{"type": "Mention", "href": p.actor, "name": "@peer@" + peerHost},
					map[string]any{"type": "Hashtag", "name": "#Courier"},
				},
				"attachment": []any{map[string]any{"type": "Image", "url": "https://media.example/cat.png",
					"mediaType": "image/png", "name": "a cat", "width": 640, "height": 480,
					"blurhash": "LEHV6nWB2yk8pyo0adR*.7kCMdnj", "focalPoint": []float64{0, 0.5}}},
			})
			got := receivedAbout(t, p, "Create", act.id)
			o := got.Object
			if o == nil || o.ID != act.objectID || o.Type != "Note" {
				t.Fatalf("the Create carries %+v, want the note %s", o, act.objectID)
			}
			var mention, hashtag bool
			for _, tag := range o.Tags {
				mention = mention || (tag.Type == "Mention" && tag.Href == p.actor)
				hashtag = hashtag || (tag.Type == "Hashtag" && tag.Name == "#Courier" && tag.Href == c.origin+"/tags/courier")
			}
			if !mention || !hashtag {
				t.Errorf("Fedify reads the tags as %+v, want a Mention of %s and the Hashtag #Courier at %s/tags/courier", o.Tags, p.actor, c.origin)
			}
			if len(o.Attachments) != 1 || o.Attachments[0].Type != "Image" || o.Attachments[0].URL != "https://media.example/cat.png" ||
				o.Attachments[0].MediaType != "image/png" || o.Attachments[0].Name != "a cat" ||
				o.Attachments[0].Width == nil || *o.Attachments[0].Width != 640 {
				t.Errorf("Fedify reads the attachments as %+v, want the Image with its media type, alt text and size", o.Attachments)
			}
			if !slices.Contains(o.Cc, p.actor) {
				t.Errorf("the mentioned actor is not among the note's recipients: cc %v", o.Cc)
			}
		}},
		{name: "article", needs: []string{"follow"}, title: "peer receives an Article as such", run: func(t *testing.T) {
			act := c2s(t, ctx, c, token, map[string]any{
				"type": "Create",
				"object": map[string]any{"type": "Article", "name": "On delivery", "content": "<p>long form</p>",
					"url": "https://blog.example/on-delivery", "to": []string{publicCollection}, "cc": []string{actor + "/followers"}},
			})
			got := receivedAbout(t, p, "Create", act.id)
			if got.Object == nil || got.Object.Type != "Article" || got.Object.Name != "On delivery" || !strings.Contains(got.Object.Content, "long form") {
				t.Errorf("the peer read the Article as %+v", got.Object)
			}
		}},
		{name: "question", needs: []string{"follow"}, title: "peer receives a Question as such", run: func(t *testing.T) {
			act := c2s(t, ctx, c, token, map[string]any{
				"type": "Question", "content": "<p>tea or coffee?</p>", "endTime": time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339),
				"oneOf": []any{map[string]any{"type": "Note", "name": "tea"}, map[string]any{"type": "Note", "name": "coffee"}},
				"to":    []string{publicCollection}, "cc": []string{actor + "/followers"},
			})
			got := receivedAbout(t, p, "Create", act.id)
			o := got.Object
			if o == nil || o.Type != "Question" || len(o.OneOf) != 2 || o.OneOf[0].Name != "tea" || o.OneOf[1].Name != "coffee" ||
				o.OneOf[0].Votes == nil || *o.OneOf[0].Votes != 0 || o.VotersCount == nil || *o.VotersCount != 0 || o.EndTime == "" {
				t.Fatalf("the peer read the Question as %+v", o)
			}
			question = act.objectID
		}},
		{name: "vote", needs: []string{"question"}, title: "courier counts the peer's vote on the Question, and the peer reads the new counts", run: func(t *testing.T) {
			var vote sentActivity
			if err := p.control(ctx, "vote", map[string]string{"target": actor, "object": question, "option": "coffee"}, &vote); err != nil {
				t.Fatal(err)
			}
			eventuallyImported(t, ctx, c, p, func() error {
				resp, body, err := c.do(ctx, http.MethodGet, question, "", nil)
				if err != nil {
					return err
				}
				var q struct {
					VotersCount int `json:"votersCount"`
					OneOf       []struct {
						Name    string                   `json:"name"`
						Replies struct{ TotalItems int } `json:"replies"`
					} `json:"oneOf"`
				}
				if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &q) != nil || len(q.OneOf) != 2 {
					return fmt.Errorf("courier serves the Question as %s: %s", resp.Status, body)
				}
				if q.VotersCount != 1 || q.OneOf[0].Replies.TotalItems != 0 || q.OneOf[1].Replies.TotalItems != 1 {
					return fmt.Errorf("courier counts the vote as %s, want one vote for coffee", body)
				}
				return nil
			})
			// The counts are federated once a minute at most: the Update
			// comes within the minute after the vote.
			upd, err := p.wait(2*time.Minute, func(e peerEvent) bool {
				return e.Event == "received" && e.Type == "Update" && e.Object != nil && e.Object.ID == question
			})
			if err != nil {
				t.Fatalf("the Update of the Question's counts: %v", err)
			}
			if o := upd.Object; o.VotersCount == nil || *o.VotersCount != 1 || len(o.OneOf) != 2 ||
				o.OneOf[1].Votes == nil || *o.OneOf[1].Votes != 1 {
				t.Errorf("the peer read the counts as %+v", o)
			}
		}},
		{name: "collections", needs: []string{"create"}, title: "peer traverses courier's outbox and followers collections", run: func(t *testing.T) {
			for _, tc := range []struct{ path, item string }{
				{"/outbox", noteCreate},
				{"/followers", p.actor},
			} {
				var got struct {
					Type       string   `json:"type"`
					TotalItems *int     `json:"totalItems"`
					Items      []string `json:"items"`
				}
				if err := p.control(ctx, "collection", map[string]string{"target": actor + tc.path}, &got); err != nil {
					t.Errorf("%s: %v", tc.path, err)
					continue
				}
				if !slices.Contains(got.Items, tc.item) || got.TotalItems == nil || *got.TotalItems != len(got.Items) {
					t.Errorf("the peer reads %s%s as %+v, want it to hold %s and count its items", actor, tc.path, got, tc.item)
				}
			}
		}},
		{name: "like", needs: []string{"create"}, title: "courier counts the peer's Like of the note", run: func(t *testing.T) {
			var like sentActivity
			if err := p.control(ctx, "like", map[string]string{"target": actor, "object": note}, &like); err != nil {
				t.Fatal(err)
			}
			eventuallyImported(t, ctx, c, p, func() error { return reactions(ctx, c, note, "likes", 1) })
			peerLike = like.ID
		}},
		{name: "announce", needs: []string{"create"}, title: "courier counts the peer's Announce of the note", run: func(t *testing.T) {
			var announce sentActivity
			if err := p.control(ctx, "announce", map[string]string{"target": actor, "object": note}, &announce); err != nil {
				t.Fatal(err)
			}
			eventuallyImported(t, ctx, c, p, func() error { return reactions(ctx, c, note, "shares", 1) })
		}},
		{name: "peer-create", needs: []string{"create"}, title: "courier imports the peer's reply (personal inbox)", run: func(t *testing.T) {
			content := "<p>Hello from Fedify to courier</p>"
			var sent struct {
				ID     string `json:"id"`
				Object string `json:"object"`
			}
			if err := p.control(ctx, "create", map[string]string{"target": actor, "content": content, "inReplyTo": note}, &sent); err != nil {
				t.Fatal(err)
			}
			eventuallyStored(t, ctx, c, p, sent.Object, func(o object) error {
				if o.content != content || o.attributedTo != p.actor || o.deleted || o.visibility != "public" || o.inReplyTo != note {
					return fmt.Errorf("courier stored the note as %+v, want %q by %s, public, in reply to %s", o, content, p.actor, note)
				}
				return nil
			})
			// Fedify signs the body too (a Linked Data Signature with the
			// RSA key, an Object Integrity Proof with the Ed25519 key):
			// courier must take such documents as they are, which the
			// import above shows. The recorded copy is cleared once
			// imported (what arrives is stored once), so the body itself
			// is no longer there to look at.
			checkRecorded(t, ctx, c, sent.ID, "alice")
			peerNote = sent.Object
		}},
		{name: "peer-update", needs: []string{"peer-create"}, title: "courier imports the peer's Update of its note (shared inbox)", run: func(t *testing.T) {
			content := "<p>Hello from Fedify to courier, edited</p>"
			var sent sentActivity
			if err := p.control(ctx, "update", map[string]string{"target": actor, "object": peerNote, "content": content}, &sent); err != nil {
				t.Fatal(err)
			}
			eventuallyStored(t, ctx, c, p, peerNote, func(o object) error {
				if o.content != content || !o.updated {
					return fmt.Errorf("courier holds the note as %+v, want %q with its update time", o, content)
				}
				return nil
			})
			checkRecorded(t, ctx, c, sent.ID, "")
		}},
		{name: "courier-follow", needs: []string{"lookup"}, title: "courier follows the peer, which accepts", run: func(t *testing.T) {
			act := c2s(t, ctx, c, token, map[string]any{
				"@context": "https://www.w3.org/ns/activitystreams",
				"type":     "Follow",
				"object":   p.actor,
			})
			got := receivedAbout(t, p, "Follow", act.id)
			checkDelivery(t, p, act.id, actor)
			if got.Actor != actor || got.ObjectID != p.actor {
				t.Errorf("the peer received a Follow by %s of %s, want by %s of %s", got.Actor, got.ObjectID, actor, p.actor)
			}
			if err := eventually(ctx, func() error { return collectionLists(ctx, c, "/users/alice/following", p.actor) }); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "peer-followers-only", needs: []string{"courier-follow"}, title: "courier imports the peer's followers-only note (Fedify fan-out)", run: func(t *testing.T) {
			checkPeerPost(t, ctx, c, p, map[string]string{"audience": "followers", "content": "<p>For my followers</p>"}, "followers", "")
		}},
		{name: "peer-direct", needs: []string{"lookup"}, title: "courier imports the peer's direct note", run: func(t *testing.T) {
			checkPeerPost(t, ctx, c, p, map[string]string{"audience": "direct", "target": actor, "content": "<p>Just for alice</p>"}, "direct", "alice")
		}},
		{name: "rotation", needs: []string{"peer-direct"}, title: "courier follows the peer's key rotation", run: func(t *testing.T) {
			// courier holds the peer's key since its first activity; the
			// next one is signed with a new key under the same key id.
			var keys struct {
				Before string `json:"before"`
				After  string `json:"after"`
			}
			if err := p.control(ctx, "rotate", map[string]string{}, &keys); err != nil {
				t.Fatal(err)
			}
			if keys.Before == "" || keys.Before == keys.After {
				t.Fatalf("the peer's key did not change: %+v", keys)
			}
			checkPeerPost(t, ctx, c, p, map[string]string{"audience": "direct", "target": actor, "content": "<p>Signed with my new key</p>"}, "direct", "alice")
		}},
		{name: "rename", needs: []string{"follow"}, title: "courier refreshes the peer's actor on its Update", run: func(t *testing.T) {
			name := "Fedify peer, renamed"
			var sent sentActivity
			if err := p.control(ctx, "rename", map[string]string{"target": actor, "name": name}, &sent); err != nil {
				t.Fatal(err)
			}
			eventuallyImported(t, ctx, c, p, func() error {
				var got sql.NullString
				err := c.database().QueryRowContext(ctx,
					`SELECT json_extract(document, '$.name') FROM remote_actors WHERE uri = ?`, p.actor).Scan(&got)
				if err != nil {
					return fmt.Errorf("courier's copy of the peer's actor: %w", err)
				}
				if got.String != name {
					return fmt.Errorf("courier holds the peer's actor named %q, want %q", got.String, name)
				}
				return nil
			})
		}},
		{name: "courier-like", needs: []string{"peer-create"}, title: "peer receives courier's Like of its note", run: func(t *testing.T) {
			act := c2s(t, ctx, c, token, map[string]any{
				"@context": "https://www.w3.org/ns/activitystreams",
				"type":     "Like",
				"object":   peerNote,
			})
			got := receivedAbout(t, p, "Like", act.id)
			checkDelivery(t, p, act.id, actor)
			if got.Actor != actor || got.ObjectID != peerNote {
				t.Errorf("the peer received a Like by %s of %s, want by %s of %s", got.Actor, got.ObjectID, actor, peerNote)
			}
		}},
		{name: "actor-update", needs: []string{"follow"}, title: "peer receives the courier actor's Update of itself", run: func(t *testing.T) {
			act := c2s(t, ctx, c, token, map[string]any{
				"@context": "https://www.w3.org/ns/activitystreams",
				"type":     "Update",
				"object":   map[string]any{"id": actor, "type": "Person", "name": "Alice of courier"},
			})
			got := receivedAbout(t, p, "Update", act.id)
			checkDelivery(t, p, act.id, actor)
			if got.Object == nil || got.Object.ID != actor || got.Object.Type != "Person" {
				t.Errorf("the Update carries %+v, want the Person %s", got.Object, actor)
			}
		}},
		{name: "update", needs: []string{"create"}, title: "peer receives the Update of the note", run: func(t *testing.T) {
			content := "Hello from courier to Fedify, edited"
			act := c2s(t, ctx, c, token, map[string]any{
				"@context": "https://www.w3.org/ns/activitystreams",
				"type":     "Update",
				"object":   map[string]any{"id": note, "type": "Note", "content": content},
			})
			got := receivedAbout(t, p, "Update", act.id)
			checkDelivery(t, p, act.id, actor)
			if got.Object == nil || got.Object.ID != note || !strings.Contains(got.Object.Content, content) {
				t.Errorf("the Update carries %+v, want the note %s with %q", got.Object, note, content)
			}
			if got.Object != nil && got.Object.Updated == "" {
				t.Errorf("the updated note has no updated time: %+v", *got.Object)
			}
		}},
		{name: "undo-like", needs: []string{"like"}, title: "courier uncounts the peer's Like on its Undo", run: func(t *testing.T) {
			var undo sentActivity
			if err := p.control(ctx, "undo", map[string]string{"target": actor, "id": peerLike}, &undo); err != nil {
				t.Fatal(err)
			}
			eventuallyImported(t, ctx, c, p, func() error { return reactions(ctx, c, note, "likes", 0) })
		}},
		{name: "delete", needs: []string{"create"}, title: "peer receives the Delete of the note", run: func(t *testing.T) {
			act := c2s(t, ctx, c, token, map[string]any{
				"@context": "https://www.w3.org/ns/activitystreams",
				"type":     "Delete",
				"object":   note,
			})
			got := receivedAbout(t, p, "Delete", act.id)
			checkDelivery(t, p, act.id, actor)
			if got.ObjectID != note {
				t.Errorf("the Delete is of %s, want the note %s", got.ObjectID, note)
			}
			resp, _, err := c.do(ctx, http.MethodGet, note, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusGone {
				t.Errorf("GET of the deleted note: %s, want 410 Gone", resp.Status)
			}
		}},
		{name: "peer-delete", needs: []string{"peer-create"}, title: "courier tombstones the peer's note on its Delete (shared inbox)", run: func(t *testing.T) {
			var sent sentActivity
			if err := p.control(ctx, "delete", map[string]string{"target": actor, "object": peerNote}, &sent); err != nil {
				t.Fatal(err)
			}
			eventuallyStored(t, ctx, c, p, peerNote, func(o object) error {
				if !o.deleted {
					return fmt.Errorf("courier still holds the deleted note: %+v", o)
				}
				return nil
			})
		}},
		{name: "proof-out", needs: []string{"follow"}, title: "Fedify verifies the integrity proof of an activity courier delivers", run: func(t *testing.T) {
			act := c2s(t, ctx, c, token, map[string]any{
				"@context": "https://www.w3.org/ns/activitystreams",
				"type":     "Note",
				"content":  "Signed twice: over HTTP and in the body",
				"to":       []string{publicCollection},
				"cc":       []string{actor + "/followers"},
			})
			receivedAbout(t, p, "Create", act.id)
			d, err := p.wait(stepTimeout, func(e peerEvent) bool {
				got, _ := e.deliveredActivity()
				return e.Event == "delivery" && got == act.id && e.Status/100 == 2
			})
			if err != nil {
				t.Fatalf("delivery of %s: %v", act.id, err)
			}
			checkProof(t, d, act.id, actor)
		}},
		{name: "proof-in", needs: []string{"lookup"}, title: "courier verifies the peer's integrity proof, and refuses a tampered copy", run: func(t *testing.T) {
			content := "<p>Proved by Fedify</p>"
			var sent struct {
				ID     string     `json:"id"`
				Object string     `json:"object"`
				Sent   []sentCopy `json:"sent"`
			}
			if err := p.control(ctx, "create", map[string]string{"target": actor, "content": content}, &sent); err != nil {
				t.Fatal(err)
			}
			// Fedify signed the body with the actor's Ed25519 key: the
			// copy courier accepted carries the proof.
			var accepted *sentCopy
			for i, s := range sent.Sent {
				if s.Status/100 == 2 {
					accepted = &sent.Sent[i]
				}
			}
			if accepted == nil {
				t.Fatalf("no POST of %s was accepted: %+v", sent.ID, sent.Sent)
			}
			if accepted.Status != http.StatusAccepted {
				t.Errorf("courier answered the POST of %s with %d, want 202", sent.ID, accepted.Status)
			}
			if len(accepted.Proofs) != 1 || accepted.Proofs[0].Cryptosuite != "eddsa-jcs-2022" ||
				!strings.HasPrefix(accepted.Proofs[0].VerificationMethod, p.actor+"#") {
				t.Fatalf("Fedify sent %s with the proofs %+v, want one eddsa-jcs-2022 proof by a key of %s", sent.ID, accepted.Proofs, p.actor)
			}
			eventuallyStored(t, ctx, c, p, sent.Object, func(o object) error {
				if o.content != content || o.attributedTo != p.actor || o.deleted {
					return fmt.Errorf("courier stored the note as %+v, want %q by %s", o, content, p.actor)
				}
				return nil
			})
			checkRecorded(t, ctx, c, sent.ID, "alice")
			// The same bytes but for the note's content, under a valid HTTP
			// signature of the same actor: only the proof fails.
			var tampered struct {
				Status int    `json:"status"`
				Body   string `json:"body"`
				Digest string `json:"digest"`
			}
			if err := p.control(ctx, "tamper", map[string]string{"id": sent.ID, "content": "<p>Not what Fedify signed</p>"}, &tampered); err != nil {
				t.Fatal(err)
			}
			if tampered.Digest == "" {
				t.Fatalf("the tampered copy of %s went without a digest header", sent.ID)
			}
			refused[tampered.Digest] = true
			if tampered.Status != http.StatusUnauthorized || !strings.Contains(tampered.Body, "proof") {
				t.Errorf("courier answered the tampered copy of %s with %d %s, want 401 naming the proof", sent.ID, tampered.Status, tampered.Body)
			}
			// The stored note is still the one Fedify signed.
			o, err := storedObject(ctx, c.database(), sent.Object)
			if err != nil {
				t.Fatal(err)
			}
			if o.content != content {
				t.Errorf("after the tampered copy courier holds the note as %+v, want %q", o, content)
			}
		}},
		{name: "quote", needs: []string{"lookup"}, title: "courier accepts the peer's QuoteRequest, and the peer reads the stamp", run: func(t *testing.T) {
			if !strings.HasPrefix(p.software, "@fedify/fedify 2.") {
				t.Skipf("skipped: %s has no QuoteRequest in its vocabulary (Fedify 2.x has)", p.software)
			}
			act := c2s(t, ctx, c, token, map[string]any{
				"@context": "https://www.w3.org/ns/activitystreams",
				"type":     "Note",
				"content":  "Quote me",
				"to":       []string{publicCollection},
				"cc":       []string{actor + "/followers"},
			})
			var req struct {
				ID     string `json:"id"`
				Object string `json:"object"`
			}
			if err := p.control(ctx, "quote", map[string]string{"target": actor, "object": act.objectID, "content": "<p>Quoting alice</p>"}, &req); err != nil {
				t.Fatal(err)
			}
			accept, err := p.wait(stepTimeout, func(e peerEvent) bool {
				return e.Event == "received" && e.Type == "Accept" && e.Actor == actor && e.ObjectID == req.ID
			})
			if err != nil {
				t.Fatalf("Accept of the QuoteRequest %s: %v\n%s", req.ID, err, inboxOutcomes(ctx, c, p.actor))
			}
			if accept.ObjectError != "" {
				t.Errorf("the peer could not read the object of the Accept %s: %s", accept.ID, accept.ObjectError)
			}
			if !strings.HasPrefix(accept.Result, c.origin+"/quotes/") {
				t.Fatalf("the Accept %s has the result %q, want a stamp under %s/quotes/", accept.ID, accept.Result, c.origin)
			}
			checkDelivery(t, p, accept.ID, actor)
			var stamp lookupResult
			if err := p.control(ctx, "lookup", map[string]string{"target": accept.Result}, &stamp); err != nil {
				t.Fatal(err)
			}
			if stamp.ID != accept.Result || stamp.Type != "QuoteAuthorization" || stamp.AttributedTo != actor {
				t.Errorf("the peer reads the stamp %s as %+v, want a QuoteAuthorization by %s", accept.Result, stamp, actor)
			}
			// courier types interactingObject and interactionTarget as
			// ids ("@type": "@id"), so that a JSON-LD reader such as
			// Fedify reads them as the quote and the quoted object.
			if stamp.InteractingObject != req.Object || stamp.InteractionTarget != act.objectID {
				t.Errorf("Fedify reads the stamp's interactingObject as %q and interactionTarget as %q, want %s and %s",
					stamp.InteractingObject, stamp.InteractionTarget, req.Object, act.objectID)
			}
		}},
		{name: "forward", needs: []string{"follow"}, title: "a second peer's proved reply to a note reaches the first peer, forwarded byte for byte", run: func(t *testing.T) {
			// p follows alice; a second Fedify server, whose actor nobody
			// here follows, replies to alice's public note.
			opts := peerOpts
			opts.keysFile, opts.name = filepath.Join(dir, "peer2-keys.json"), "second fedify peer"
			p2 := startPeer(t, owner, ctx, node, opts)
			peers = append(peers, p2)
			act := c2s(t, ctx, c, token, map[string]any{
				"@context": "https://www.w3.org/ns/activitystreams",
				"type":     "Note",
				"content":  "Reply to me",
				"to":       []string{publicCollection},
				"cc":       []string{actor + "/followers"},
			})
			receivedAbout(t, p, "Create", act.id)
			content := "<p>A reply from another server</p>"
			var sent struct {
				ID     string     `json:"id"`
				Object string     `json:"object"`
				Sent   []sentCopy `json:"sent"`
			}
			if err := p2.control(ctx, "create", map[string]string{"target": actor, "content": content, "inReplyTo": act.objectID}, &sent); err != nil {
				t.Fatal(err)
			}
			var original *sentCopy
			for i, s := range sent.Sent {
				if s.Status/100 == 2 {
					original = &sent.Sent[i]
				}
			}
			if original == nil || len(original.Proofs) == 0 {
				t.Fatalf("the second peer's POSTs of %s: %+v, want one accepted, with a proof", sent.ID, sent.Sent)
			}
			eventuallyStored(t, ctx, c, p2, sent.Object, func(o object) error {
				if o.content != content || o.inReplyTo != act.objectID {
					return fmt.Errorf("courier stored the reply as %+v, want %q in reply to %s", o, content, act.objectID)
				}
				return nil
			})
			got := receivedAbout(t, p, "Create", sent.ID)
			if got.Actor != p2.actor || got.Object == nil || got.Object.ID != sent.Object || got.Object.InReplyTo != act.objectID {
				t.Errorf("the first peer took the forward as %s by %s of %+v, want the reply %s by %s", got.Type, got.Actor, got.Object, sent.Object, p2.actor)
			}
			d, err := p.wait(stepTimeout, func(e peerEvent) bool {
				got, _ := e.deliveredActivity()
				return e.Event == "delivery" && got == sent.ID && e.Status/100 == 2
			})
			if err != nil {
				t.Fatalf("the forward of %s: %v", sent.ID, err)
			}
			if d.BodySHA256 != original.SHA256 || d.BodyLength != original.Length {
				t.Errorf("the forward of %s is %d bytes (SHA-256 %s), the second peer sent %d (SHA-256 %s): not byte for byte",
					sent.ID, d.BodyLength, d.BodySHA256, original.Length, original.SHA256)
			}
			// Signed over HTTP by alice, whom the first peer follows, and
			// speaking for the second peer's actor through its proof.
			// (An Ed25519 signature is one Fedify's verifyRequest cannot
			// check: it takes keys only from publicKey.)
			if !strings.HasPrefix(d.KeyID, actor+"#") || (d.Algorithm != "ed25519" && (!d.Verified || d.KeyOwner != actor)) {
				t.Errorf("the peer's signature check of the forward: %s", d.raw)
			}
			checkProof(t, d, sent.ID, p2.actor)
		}},
		{name: "redelivery", needs: []string{"follow"}, title: "courier redelivers to the peer once it is back", run: func(t *testing.T) {
			u, err := url.Parse(p.origin)
			if err != nil {
				t.Fatal(err)
			}
			port, err := strconv.Atoi(u.Port())
			if err != nil {
				t.Fatal(err)
			}
			if err := p.stop(); err != nil {
				t.Fatal(err)
			}
			act := c2s(t, ctx, c, token, map[string]any{
				"@context": "https://www.w3.org/ns/activitystreams",
				"type":     "Note",
				"content":  "Posted while the peer was down",
				"to":       []string{publicCollection},
				"cc":       []string{actor + "/followers"},
			})
			// courier's first attempt finds nobody listening: it must keep the
			// delivery for a retry, not drop it.
			err = eventually(ctx, func() error {
				outcomes, err := attempts(ctx, c.database(), act.id)
				if err != nil {
					return err
				}
				if !slices.Contains(outcomes, "retry") {
					return fmt.Errorf("courier's delivery attempts of %s: %v, want a retry", act.id, outcomes)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			opts := peerOpts
			opts.port, opts.name = port, "fedify peer (restarted)"
			p = startPeer(t, owner, ctx, node, opts)
			peers = append(peers, p)
			got := receivedAbout(t, p, "Create", act.id)
			checkDelivery(t, p, act.id, actor)
			if got.Object == nil || got.Object.ID != act.objectID {
				t.Errorf("the redelivered Create carries %+v, want the note %s", got.Object, act.objectID)
			}
			// courier records the retry and then one success.
			err = eventually(ctx, func() error {
				outcomes, err := attempts(ctx, c.database(), act.id)
				if err != nil {
					return err
				}
				if len(outcomes) < 2 || outcomes[0] != "retry" || outcomes[len(outcomes)-1] != "delivered" ||
					slices.Index(outcomes, "delivered") != len(outcomes)-1 {
					return fmt.Errorf("courier's delivery attempts of %s: %v, want retries, then one delivered", act.id, outcomes)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}},
		{name: "unfollow", needs: []string{"follow"}, title: "courier drops the peer from its followers on its Undo of the Follow", run: func(t *testing.T) {
			var undo sentActivity
			req := map[string]string{"target": actor, "id": peerFollow, "type": "Follow", "object": actor}
			if err := p.control(ctx, "undo", req, &undo); err != nil {
				t.Fatal(err)
			}
			eventuallyImported(t, ctx, c, p, func() error {
				n, err := totalItems(ctx, c, "/users/alice/followers")
				if err != nil {
					return err
				}
				if n != 0 {
					return fmt.Errorf("courier lists %d followers, want none", n)
				}
				return nil
			})
		}},
	}
	runSteps(t, steps)

	// Across the whole run: every delivery to the peer verified, Fedify
	// raised no inbox error, courier logged nothing an operator must act on
	// and, when built with -race, reported no data race.
	// The peer took each activity once: a redelivery after a success would
	// show here, since a restarted peer has forgotten what it processed.
	deliveries := 0
	took := map[string]int{}
	var events []peerEvent
	for _, q := range peers {
		events = append(events, q.all()...)
	}
	refusedEd25519 := 0
	for _, e := range events {
		switch e.Event {
		case "delivery":
			deliveries++
			if e.Scheme == "rfc9421" && e.Algorithm == "ed25519" && e.Status == http.StatusUnauthorized {
				// Courier's Ed25519 knock, refused by a Fedify that takes
				// keys only from publicKey: courier falls back to RSA in
				// the same attempt and remembers the refusal (counted below).
				refusedEd25519++
				continue
			}
			if (!e.Verified && !proofBy(e, e.activityActor())) || e.Status/100 != 2 {
				t.Errorf("a delivery to the peer was not accepted: %s", e.raw)
			}
		case "received":
			took[e.ID]++
		case "inbox_error":
			t.Errorf("the peer's inbox failed: %s", e.Error)
		}
	}
	for id, n := range took {
		if n > 1 {
			t.Errorf("the peer took %s %d times", id, n)
		}
	}
	// No inbox POST of the peer's was refused for its signature: a 401
	// would make Fedify 2 retry with draft-cavage, a second request.
	posts := c.posts()
	rfc9421 := 0
	for _, q := range posts {
		if q.RFC9421 {
			rfc9421++
		}
		if refused[q.Digest] {
			if q.Status != http.StatusUnauthorized {
				t.Errorf("courier answered a tampered POST to %s with %d, want 401", q.Path, q.Status)
			}
			continue
		}
		if q.Status == http.StatusUnauthorized {
			t.Errorf("courier answered an inbox POST to %s with 401 (RFC 9421: %v)", q.Path, q.RFC9421)
		}
	}
	signed9421 := 0
	for _, e := range events {
		if e.Event == "delivery" && e.Scheme == "rfc9421" && (e.Verified || proofBy(e, e.activityActor())) && e.Status/100 == 2 {
			signed9421++
		}
	}
	if strings.HasPrefix(p.software, "@fedify/fedify 2.") {
		if len(posts) == 0 || rfc9421 != len(posts) {
			t.Errorf("%d of the peer's %d inbox POSTs were RFC 9421, want all", rfc9421, len(posts))
		}
		if signed9421 == 0 {
			t.Errorf("courier made no RFC 9421 delivery to the peer that Fedify verified")
		}
		if refusedEd25519 > 1 {
			t.Errorf("courier knocked with Ed25519 %d times after the peer refused it", refusedEd25519)
		}
	}
	t.Logf("the peer's inbox POSTs: %d, %d of them RFC 9421; courier's deliveries: %d, %d of them RFC 9421 (and %d Ed25519 knocks refused)",
		len(posts), rfc9421, deliveries, signed9421, refusedEd25519)
	if errs := c.errorLogs(); len(errs) > 0 {
		t.Errorf("courier logged %d errors:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	if races := c.raceReports(); len(races) > 0 {
		t.Errorf("courier reported %d data races", len(races))
	}
	t.Logf("%d deliveries to the peer; the interoperability run took %s (after the build: %s)",
		deliveries, time.Since(started).Round(time.Millisecond), time.Since(built).Round(time.Millisecond))
}

// checkPeerPost has the peer post a note that is not public and checks
// that courier stores it with visibility, received at inbox.
func checkPeerPost(t *testing.T, ctx context.Context, c *courier, p *peer, req map[string]string, visibility, inbox string) {
	t.Helper()
	var sent struct {
		ID     string `json:"id"`
		Object string `json:"object"`
	}
	if err := p.control(ctx, "post", req, &sent); err != nil {
		t.Fatal(err)
	}
	eventuallyStored(t, ctx, c, p, sent.Object, func(o object) error {
		if o.content != req["content"] || o.attributedTo != p.actor || o.visibility != visibility {
			return fmt.Errorf("courier stored the note as %+v, want %q by %s, %s", o, req["content"], p.actor, visibility)
		}
		return nil
	})
	checkRecorded(t, ctx, c, sent.ID, inbox)
}

// step is one step of a scenario. needs names the steps it depends on.
type step struct {
	name  string
	title string
	needs []string
	run   func(t *testing.T)
}

// runSteps runs the steps in order as subtests, skipping a step when one it
// needs did not pass.
func runSteps(t *testing.T, steps []step) {
	t.Helper()
	passed := map[string]bool{}
	for _, s := range steps {
		var missing []string
		for _, n := range s.needs {
			if !passed[n] {
				missing = append(missing, n)
			}
		}
		passed[s.name] = t.Run(s.title, func(t *testing.T) {
			if len(missing) > 0 {
				t.Skipf("skipped: needs %s, which did not pass", strings.Join(missing, ", "))
			}
			s.run(t)
		}) && len(missing) == 0
	}
}

// sentActivity is the peer's answer to a control that sent an activity.
type sentActivity struct {
	ID string `json:"id"`
}

// lookupResult is the peer's view of a looked-up object.
type lookupResult struct {
	ID                string `json:"id"`
	Type              string `json:"type"`
	Content           string `json:"content"`
	AttributedTo      string `json:"attributedTo"`
	Actor             string `json:"actor"`
	Object            string `json:"object"`
	PreferredUsername string `json:"preferredUsername"`
	InteractingObject string `json:"interactingObject"`
	InteractionTarget string `json:"interactionTarget"`
	Inbox             string `json:"inbox"`
	SharedInbox       string `json:"sharedInbox"`
	PublicKey         *struct {
		ID    string `json:"id"`
		Owner string `json:"owner"`
	} `json:"publicKey"`
}

// checkActor checks the peer's view of courier's actor.
func checkActor(t *testing.T, got lookupResult, actor, origin string) {
	t.Helper()
	if got.SharedInbox != origin+"/inbox" {
		t.Errorf("the peer sees the shared inbox %q, want %s/inbox", got.SharedInbox, origin)
	}
	if got.ID != actor || got.Type != "Person" || got.PreferredUsername != "alice" {
		t.Errorf("the peer sees %s %s (%q), want Person %s (alice)", got.Type, got.ID, got.PreferredUsername, actor)
	}
	if got.Inbox != actor+"/inbox" {
		t.Errorf("the peer sees the inbox %q, want %s/inbox", got.Inbox, actor)
	}
	if got.PublicKey == nil || got.PublicKey.ID != actor+"#main-key" || got.PublicKey.Owner != actor {
		t.Errorf("the peer sees the public key %+v, want %s#main-key owned by %s", got.PublicKey, actor, actor)
	}
}

// checkDelivery checks the peer's own verification of the delivery that
// brought activity id: signed by the actor's main key, verified, accepted.
func checkDelivery(t *testing.T, p *peer, id, actor string) {
	t.Helper()
	// The accepted POST of the activity: an RFC 9421 Ed25519 one that
	// Fedify refused (it takes HTTP signature keys only from publicKey, not
	// from a Multikey) is followed at once by one with the RSA key.
	d, err := p.wait(stepTimeout, func(e peerEvent) bool {
		got, _ := e.deliveredActivity()
		return e.Event == "delivery" && got == id && e.Status/100 == 2
	})
	if err != nil {
		t.Errorf("delivery of %s: %v", id, err)
		return
	}
	if d.Status != http.StatusAccepted && d.Status != http.StatusOK {
		t.Errorf("the peer answered the delivery of %s with %d", id, d.Status)
	}
	if !strings.HasPrefix(d.ContentType, "application/activity+json") &&
		!strings.HasPrefix(d.ContentType, "application/ld+json") {
		t.Errorf("the delivery of %s has Content-Type %q", id, d.ContentType)
	}
	if d.Scheme == "rfc9421" && d.Algorithm == "ed25519" && !d.Verified {
		// Fedify's verifyRequest takes keys only from publicKey, not from
		// an assertionMethod Multikey; its inbox accepts the activity on
		// its integrity proof by the same key instead.
		if !proofBy(d, actor) {
			t.Errorf("the peer accepted %s signed with Ed25519, neither signature nor proof verified: %s", id, d.raw)
		}
		return
	}
	if d.Scheme == "rfc9421" {
		// RFC 9421, with the RSA key or the Ed25519 one (FEP-521a).
		if !d.Verified || (d.VerifiedKey != actor+"#main-key" && d.VerifiedKey != actor+"#ed25519-key") || d.KeyOwner != actor {
			t.Errorf("the peer's signature check of %s: %s", id, d.raw)
		}
		for _, h := range []string{"@method", "@target-uri", "content-digest"} {
			if !slices.Contains(strings.Fields(d.SignedHeaders), h) {
				t.Errorf("the delivery of %s does not cover %s (components %q)", id, h, d.SignedHeaders)
			}
		}
		return
	}
	if !d.Verified || d.VerifiedKey != actor+"#main-key" || d.KeyOwner != actor {
		t.Errorf("the peer's signature check of %s: %s", id, d.raw)
	}
	for _, h := range []string{"(request-target)", "host", "date", "digest"} {
		if !slices.Contains(strings.Fields(d.SignedHeaders), h) {
			t.Errorf("the delivery of %s does not sign %s (headers=%q)", id, h, d.SignedHeaders)
		}
	}
}

// proofBy reports whether Fedify verified the integrity proof of the
// delivery d as made by a key of actor's.
func proofBy(d peerEvent, actor string) bool {
	if d.Proof == nil || !d.Proof.Verified {
		return false
	}
	for _, k := range d.Proof.Keys {
		if k.Verified && k.Controller == actor {
			return true
		}
	}
	return false
}

// checkProof checks the peer's verification of the integrity proof of the
// delivery d of the activity id: one eddsa-jcs-2022 proof by a key of
// actor's, verified by Fedify's verifyProof, and verifyObject's verdict
// that it authenticates the activity's actor.
func checkProof(t *testing.T, d peerEvent, id, actor string) {
	t.Helper()
	if d.Proof == nil {
		t.Errorf("the delivery of %s carries no integrity proof: %s", id, d.raw)
		return
	}
	if !d.Proof.Verified || d.Proof.Error != "" || len(d.Proof.Keys) != 1 {
		t.Errorf("Fedify's check of the proof of %s: %+v, want one proof, verified", id, *d.Proof)
		return
	}
	k := d.Proof.Keys[0]
	if !k.Verified || k.Cryptosuite != "eddsa-jcs-2022" || k.Controller != actor || !strings.HasPrefix(k.Method, actor+"#") {
		t.Errorf("Fedify's check of the proof of %s: %+v, want an eddsa-jcs-2022 proof by a key of %s, verified", id, k, actor)
	}
}

// receivedAbout waits for the peer's inbox to take the activity id of type
// typ.
func receivedAbout(t *testing.T, p *peer, typ, id string) peerEvent {
	t.Helper()
	e, err := p.wait(stepTimeout, func(e peerEvent) bool {
		return e.Event == "received" && e.ID == id
	})
	if err != nil {
		t.Fatalf("%s %s at the peer: %v", typ, id, err)
	}
	if e.Type != typ {
		t.Fatalf("the peer received %s as a %s, want %s", id, e.Type, typ)
	}
	if e.ObjectError != "" {
		t.Errorf("the peer could not read the object of %s: %s", id, e.ObjectError)
	}
	return e
}

// written is a client-to-server write courier accepted.
type written struct {
	id       string // the activity id (Location)
	objectID string // the id of its object
}

// c2s posts activity to the outbox of the actor of token and returns what
// courier created.
func c2s(t *testing.T, ctx context.Context, c *courier, token string, activity map[string]any) written {
	t.Helper()
	resp, body, err := c.do(ctx, http.MethodPost, "/users/alice/outbox", token, activity)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /users/alice/outbox %v: %s: %s", activity["type"], resp.Status, body)
	}
	var doc struct {
		ID     string          `json:"id"`
		Object json.RawMessage `json:"object"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("the outbox answered %q: %v", body, err)
	}
	if loc := resp.Header.Get("Location"); loc != doc.ID {
		t.Errorf("Location %q is not the activity's id %q", loc, doc.ID)
	}
	w := written{id: doc.ID}
	var ref struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(doc.Object, &w.objectID) != nil && json.Unmarshal(doc.Object, &ref) == nil {
		w.objectID = ref.ID
	}
	if w.id == "" || w.objectID == "" {
		t.Fatalf("the outbox answered %s without an activity or object id", body)
	}
	return w
}

// collectionPage is the first page of one of courier's actor collections.
func collectionPage(ctx context.Context, c *courier, path string) (total int, items []string, err error) {
	resp, body, err := c.do(ctx, http.MethodGet, path+"?page=1", "", nil)
	if err != nil {
		return 0, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	var page struct {
		TotalItems   int      `json:"totalItems"`
		OrderedItems []string `json:"orderedItems"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return 0, nil, fmt.Errorf("%s page %q: %w", path, body, err)
	}
	return page.TotalItems, page.OrderedItems, nil
}

// collectionLists checks that the actor collection at path (followers,
// following) holds exactly id.
func collectionLists(ctx context.Context, c *courier, path, id string) error {
	total, items, err := collectionPage(ctx, c, path)
	if err != nil {
		return err
	}
	if total != 1 || !slices.Contains(items, id) {
		return fmt.Errorf("courier's %s lists %v (totalItems %d), want exactly %s", path, items, total, id)
	}
	return nil
}

// totalItems is the totalItems of courier's actor collection at path.
func totalItems(ctx context.Context, c *courier, path string) (int, error) {
	total, _, err := collectionPage(ctx, c, path)
	return total, err
}

// reactions checks the totalItems of the likes or shares collection
// embedded in a courier note's document.
func reactions(ctx context.Context, c *courier, note, collection string, want int) error {
	resp, body, err := c.do(ctx, http.MethodGet, note, "", nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", note, resp.Status)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("the note's document %q: %w", body, err)
	}
	var coll struct {
		TotalItems *int `json:"totalItems"`
	}
	if err := json.Unmarshal(doc[collection], &coll); err != nil || coll.TotalItems == nil {
		return fmt.Errorf("the note's document has no %s collection with totalItems: %s", collection, body)
	}
	if *coll.TotalItems != want {
		return fmt.Errorf("the note's %s totalItems is %d, want %d", collection, *coll.TotalItems, want)
	}
	return nil
}

// eventuallyImported waits for check to pass and fails t otherwise, with
// what courier recorded of the peer's activities.
func eventuallyImported(t *testing.T, ctx context.Context, c *courier, p *peer, check func() error) {
	t.Helper()
	if err := eventually(ctx, check); err != nil {
		t.Fatalf("%v\n%s", err, inboxOutcomes(ctx, c, p.actor))
	}
}

// eventuallyStored waits for courier to store the object uri in a state
// check accepts, as eventuallyImported does.
func eventuallyStored(t *testing.T, ctx context.Context, c *courier, p *peer, uri string, check func(object) error) {
	t.Helper()
	eventuallyImported(t, ctx, c, p, func() error {
		o, err := storedObject(ctx, c.database(), uri)
		if err != nil {
			return err
		}
		return check(o)
	})
}

// object is a remote object as courier stored it.
type object struct {
	content, attributedTo, visibility, inReplyTo string
	updated, deleted                             bool
}

// storedObject reads the object uri from courier's objects table. A remote
// object's text is stored once, in its document (migration 0012).
func storedObject(ctx context.Context, db *sql.DB, uri string) (object, error) {
	var o object
	var updated, deleted sql.NullInt64
	var inReplyTo sql.NullString
	err := db.QueryRowContext(ctx,
		`SELECT CASE WHEN content = '' AND actor_id IS NULL AND json_valid(document)
			THEN COALESCE(json_extract(document, '$.content'), '') ELSE content END,
			attributed_to, visibility, in_reply_to, updated_at, deleted_at FROM objects WHERE uri = ?`, uri).
		Scan(&o.content, &o.attributedTo, &o.visibility, &inReplyTo, &updated, &deleted)
	if errors.Is(err, sql.ErrNoRows) {
		return o, fmt.Errorf("the note %s is not in courier's objects table", uri)
	}
	if err != nil {
		return o, fmt.Errorf("read courier's objects table: %w", err)
	}
	o.inReplyTo, o.updated, o.deleted = inReplyTo.String, updated.Valid, deleted.Valid
	return o, nil
}

// attempts returns the outcomes of courier's delivery attempts of the
// activity id, oldest first.
func attempts(ctx context.Context, db *sql.DB, id string) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT outcome FROM delivery_attempts WHERE activity_id = ? ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("read courier's delivery attempts: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// checkRecorded checks that courier recorded the imported activity id as
// received at the inbox of the local actor inbox ("" for the shared inbox),
// and kept no second copy of it: the recorded document is cleared on import
// (the row stays, to recognise redeliveries).
func checkRecorded(t *testing.T, ctx context.Context, c *courier, id, inbox string) {
	t.Helper()
	var got, doc string
	var imported bool
	err := c.database().QueryRowContext(ctx,
		`SELECT inbox, document, imported_at IS NOT NULL FROM inbox_activities WHERE activity_id = ?`, id).
		Scan(&got, &doc, &imported)
	if err != nil {
		t.Errorf("courier's record of %s: %v", id, err)
		return
	}
	if got != inbox {
		t.Errorf("courier recorded %s at the inbox %q, want %q (\"\" is the shared inbox)", id, got, inbox)
	}
	if imported && doc != "" {
		t.Errorf("courier kept the document of %s after importing it (%d bytes): it is stored twice", id, len(doc))
	}
}

// inboxOutcomes describes what courier recorded of the activities from
// actor, for a failure report.
func inboxOutcomes(ctx context.Context, c *courier, actor string) string {
	rows, err := c.database().QueryContext(ctx,
		`SELECT activity_id, type, COALESCE(outcome, '(not imported)') FROM inbox_activities WHERE actor = ? ORDER BY received_at`, actor)
	if err != nil {
		return fmt.Sprintf("courier's inbox record cannot be read: %v", err)
	}
	defer rows.Close()
	var b strings.Builder
	b.WriteString("courier's inbox record of the peer's activities:")
	for rows.Next() {
		var id, typ, outcome string
		if err := rows.Scan(&id, &typ, &outcome); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "\n  %s %s: %s", typ, id, outcome)
	}
	if err := rows.Err(); err != nil {
		return err.Error()
	}
	return b.String()
}
