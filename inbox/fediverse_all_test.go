package inbox_test

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// origins matches the scheme and host of every URL in a capture.
var origins = regexp.MustCompile(`https?://[a-zA-Z0-9._-]+(:[0-9]+)?`)

// Placeholders of local things in a rewritten capture (they contain no URL,
// so rewriting origins leaves them alone).
const (
	localAlice  = "LOCAL-ALICE"
	localNote   = "LOCAL-NOTE"
	localFollow = "LOCAL-FOLLOW"
)

// fediverseCase is how one captured activity is replayed and what it must
// do.
type fediverseCase struct {
	// local maps URLs of the capture to the local thing they stand for
	// (localAlice, localNote, localFollow), so that the activity concerns
	// courier.
	local map[string]string
	// before are captures posted first (their effects are the setting).
	before []string
	// follows is a capture URL of a remote actor alice follows before
	// (localFollow is her Follow of it).
	follows string
	// stranger: no local actor follows the capture's sender (by default
	// alice does, so that what it sends concerns someone here).
	stranger bool
	// want is the import outcome ("refused:" matches any refusal), or
	// "http NNN" for the inbox's answer when it is not 202.
	want string
}

// TestFediverseEveryActivity posts every activity captured from real
// servers in testdata/fediverse (Mastodon, Pleroma, Lemmy, Friendica,
// GNU social, lotide, mbin, Mitra, PeerTube, Smithereen, WordPress) through
// the real inbox and importer, each on its own courier. The captures carry
// no HTTP signatures: each is signed with a test key that the loopback
// remote publishes for its actor, every host it names is rewritten to that
// remote, and the objects it targets to local ones where listed; the
// structure is kept as captured.
func TestFediverseEveryActivity(t *testing.T) {
	t.Parallel()
	alice := func(u string) map[string]string { return map[string]string{u: localAlice} }
	note := func(u string) map[string]string { return map[string]string{u: localNote} }
	cases := map[string]fediverseCase{
		"friendica/create_note.json":   {want: inbox.OutcomeStored},
		"friendica/create_page_1.json": {want: inbox.OutcomeStored},
		"friendica/create_page_2.json": {want: inbox.OutcomeStored},
		// An Update of a post never received is fetched from its origin
		// (deref.go); the test remote serves actors only: 404.
		"friendica/update_note.json":       {want: inbox.OutcomeNoMatch},
		"friendica/delete.json":            {before: []string{"friendica/update_note.json"}, want: inbox.OutcomeDeleted},
		"friendica/like_page.json":         {local: note("https://pirati.ca/objects/ec054ce7-2062-3bfa-8687-ca8313624820"), want: inbox.OutcomeCounted},
		"friendica/dislike_page.json":      {local: note("https://pirati.ca/objects/ec054ce7-2062-3bfa-8687-ca8313624820"), want: inbox.OutcomeUnsupported},
		"friendica/undo_dislike_page.json": {want: inbox.OutcomeUnsupported},
		"gnusocial/create_note.json":       {want: inbox.OutcomeStored},
		"gnusocial/create_page.json":       {want: inbox.OutcomeStored},
		"gnusocial/like_note.json":         {local: note("https://instance.gnusocial.test/object/note/1337"), want: inbox.OutcomeCounted},

		"lemmy/block/block_user.json":      {local: alice("http://ds9.lemmy.ml/u/lemmy_alpha"), want: inbox.OutcomeBlocked},
		"lemmy/block/undo_block_user.json": {local: alice("http://ds9.lemmy.ml/u/lemmy_alpha"), before: []string{"lemmy/block/block_user.json"}, want: inbox.OutcomeUndone},
		// Moderation, featuring and reports: recorded, not imported.
		"lemmy/community/add_featured_post.json":    {want: inbox.OutcomeUnsupported},
		"lemmy/community/add_mod.json":              {want: inbox.OutcomeUnsupported},
		"lemmy/community/lock_note.json":            {want: inbox.OutcomeUnsupported},
		"lemmy/community/lock_page.json":            {want: inbox.OutcomeUnsupported},
		"lemmy/community/remove_featured_post.json": {want: inbox.OutcomeUnsupported},
		"lemmy/community/remove_mod.json":           {want: inbox.OutcomeUnsupported},
		"lemmy/community/report_page.json":          {want: inbox.OutcomeUnsupported},
		"lemmy/community/resolve_report_page.json":  {want: inbox.OutcomeUnsupported},
		"lemmy/community/undo_lock_note.json":       {want: inbox.OutcomeUnsupported},
		"lemmy/community/undo_lock_page.json":       {want: inbox.OutcomeUnsupported},
		"lemmy/community/warn.json":                 {want: inbox.OutcomeUnsupported},
		// A moderator's Update of the community: another actor's document.
		"lemmy/community/update_community.json": {want: "http 403"},
		// A community's boost of a post nobody local follows.
		"lemmy/community/announce_create_page.json":               {want: inbox.OutcomeIgnored},
		"lemmy/create_or_update/create_comment.json":              {want: inbox.OutcomeStored},
		"lemmy/create_or_update/create_private_message.json":      {want: inbox.OutcomeStored},
		"lemmy/create_or_update/create_private_message_0.19.json": {want: inbox.OutcomeStored},
		"lemmy/create_or_update/update_page.json":                 {want: inbox.OutcomeNoMatch}, // as friendica/update_note.json
		"lemmy/create_page.json":                                  {want: inbox.OutcomeStored},
		"lemmy/delete_user.json":                                  {want: inbox.OutcomeActorGone},
		"lemmy/deletion/delete_page.json":                         {before: []string{"lemmy/create_page.json"}, want: inbox.OutcomeDeleted},
		"lemmy/deletion/delete_private_message.json":              {before: []string{"lemmy/create_or_update/create_private_message.json"}, want: inbox.OutcomeDeleted},
		// A moderator's removal of someone else's comment is not honoured.
		"lemmy/deletion/remove_note.json":                 {before: []string{"lemmy/create_or_update/create_comment.json"}, want: "refused:"},
		"lemmy/deletion/undo_delete_page.json":            {want: inbox.OutcomeUnsupported},
		"lemmy/deletion/undo_delete_private_message.json": {want: inbox.OutcomeUnsupported},
		"lemmy/deletion/undo_remove_note.json":            {want: inbox.OutcomeUnsupported},
		"lemmy/follow.json":                               {local: alice("http://enterprise.lemmy.ml/c/main"), want: inbox.OutcomeFollowed},
		"lemmy/following/accept.json": {local: map[string]string{"http://ds9.lemmy.ml/u/lemmy_alpha": localAlice,
			"http://ds9.lemmy.ml/activities/follow/6abcd50b-b8ca-4952-86b0-a6dd8cc12866": localFollow},
			follows: "http://enterprise.lemmy.ml/c/main", want: inbox.OutcomeAnswered},
		"lemmy/following/undo_follow.json": {local: alice("http://enterprise.lemmy.ml/c/main"), before: []string{"lemmy/follow.json"}, want: inbox.OutcomeUnfollowed},
		"lemmy/like_note.json":             {local: note("http://ds9.lemmy.ml/comment/1"), want: inbox.OutcomeCounted},
		"lemmy/voting/dislike_page.json":   {local: note("http://ds9.lemmy.ml/post/1"), want: inbox.OutcomeUnsupported},
		// Its Like was never received.
		"lemmy/voting/undo_dislike_page.json": {local: note("http://ds9.lemmy.ml/post/1"), want: inbox.OutcomeNoMatch},
		"lemmy/voting/undo_like_note.json":    {local: note("http://ds9.lemmy.ml/comment/1"), before: []string{"lemmy/like_note.json"}, want: inbox.OutcomeUndone},

		"lotide/create_note_reply.json": {want: inbox.OutcomeStored},
		"lotide/create_page.json":       {want: inbox.OutcomeStored},
		"lotide/create_page_image.json": {want: inbox.OutcomeStored},
		// The post it deletes was never received: a tombstone is kept.
		"lotide/delete_note.json": {want: inbox.OutcomeDeleted},
		"lotide/follow.json":      {local: alice("https://beehaw.org/c/foss"), want: inbox.OutcomeFollowed},

		"mastodon/create_note.json": {want: inbox.OutcomeStored},
		"mastodon/delete.json":      {want: inbox.OutcomeDeleted},
		"mastodon/flag.json":        {want: inbox.OutcomeUnsupported},
		"mastodon/follow.json":      {local: alice("https://ds9.lemmy.ml/c/testcom"), want: inbox.OutcomeFollowed},
		"mastodon/like_page.json":   {local: note("https://ds9.lemmy.ml/post/147"), want: inbox.OutcomeCounted},
		// A bare Note (no activity) posted to an inbox.
		"mastodon/private_message.json": {want: "http 400"},
		"mastodon/undo_follow.json":     {local: alice("https://ds9.lemmy.ml/c/testcom"), before: []string{"mastodon/follow.json"}, want: inbox.OutcomeUnfollowed},
		"mastodon/undo_like_page.json":  {local: note("https://ds9.lemmy.ml/post/147"), before: []string{"mastodon/like_page.json"}, want: inbox.OutcomeUndone},

		"mbin/accept.json": {local: map[string]string{"https://some-other.instance/f/object/c51ea652-e594-4920-a989-f5350f0cec05": localFollow},
			follows: "https://some-mbin.instance/m/someMag", want: inbox.OutcomeAnswered},
		"mbin/flag.json": {want: inbox.OutcomeUnsupported},
		"mitra/accept.json": {local: map[string]string{"https://voyager.lemmy.ml/activities/follow/7d782f02-b91d-4455-b6c0-772540f00c2d": localFollow},
			follows: "https://mitra.social/users/localtestgroup", want: inbox.OutcomeAnswered},
		"mitra/create_post.json": {want: inbox.OutcomeStored},
		// A channel's boost of a video nobody local follows.
		"peertube/announce_video.json": {stranger: true, want: inbox.OutcomeIgnored},
		"pleroma/create_note.json":     {want: inbox.OutcomeStored},
		"pleroma/delete.json":          {want: inbox.OutcomeDeleted},
		"pleroma/follow.json":          {local: alice("https://lemmy.ca/u/kinetix"), want: inbox.OutcomeFollowed},
		"smithereen/create_note.json":  {want: inbox.OutcomeStored},
		// A boost of an embedded Update, by an actor nobody local follows.
		"wordpress/announce.json": {stranger: true, want: inbox.OutcomeIgnored},
	}
	var files []string
	if err := filepath.WalkDir(filepath.Join("testdata", "fediverse"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".json") {
			files = append(files, strings.TrimPrefix(filepath.ToSlash(p), "testdata/fediverse/"))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		tc, ok := cases[name]
		if !ok {
			t.Errorf("%s: a capture without a case", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			a := b.localActor(t, "alice", false)
			_, n, err := notetest.Create(b.ctx, b.st, a, notetest.Input{Content: "mine", To: []string{store.Public}})
			if err != nil {
				t.Fatal(err)
			}
			r := b.remote.srv.URL
			locals := map[string]string{localAlice: a.URI, localNote: n.URI}
			if tc.follows != "" {
				f, err := b.st.Follow(b.ctx, a, origins.ReplaceAllString(tc.follows, r))
				if err != nil {
					t.Fatal(err)
				}
				locals[localFollow] = f.URI
			}
			follower := a
			if tc.stranger {
				follower = nil
			}
			for _, before := range tc.before {
				if got := b.replay(t, before, tc.local, locals, follower); strings.HasPrefix(got, "http ") {
					t.Fatalf("before, %s: %s", before, got)
				}
			}
			got := b.replay(t, name, tc.local, locals, follower)
			if got != tc.want && !(tc.want == "refused:" && strings.HasPrefix(got, tc.want)) {
				t.Fatalf("%q, want %q", got, tc.want)
			}
			if got == inbox.OutcomeStored {
				b.keptWhole(t, b.rewritten(t, name, tc.local, locals))
			}
		})
	}
}

// rewritten returns the capture name as replay posts it: the URLs of local
// mapped to local things, every origin to the remote's, the placeholders to
// locals.
func (b *testBundle) rewritten(t *testing.T, name string, local, locals map[string]string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "fediverse", name))
	if err != nil {
		t.Fatal(err)
	}
	body := string(raw)
	for from, to := range local {
		body = strings.ReplaceAll(body, from, to)
	}
	body = origins.ReplaceAllString(body, b.remote.srv.URL)
	for from, to := range locals {
		body = strings.ReplaceAll(body, from, to)
	}
	return withoutProof(t, body)
}

// withoutProof returns a rewritten capture without its FEP-8b32 proof
// (Mitra's): the rewrite changed the bytes the proof was made over, and a
// proof that does not verify refuses the activity.
func withoutProof(t *testing.T, body string) string {
	t.Helper()
	if !strings.Contains(body, `"proof"`) {
		return body
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "proof")
	return string(mustJSON(t, doc))
}

// keptWhole checks that the object a stored capture carried is stored
// with its tags (mentions, hashtags, emoji) and attachments as sent.
func (b *testBundle) keptWhole(t *testing.T, body string) {
	t.Helper()
	var act struct {
		Object map[string]any `json:"object"`
	}
	if err := json.Unmarshal([]byte(body), &act); err != nil || act.Object == nil {
		return // an object by reference
	}
	id, _ := act.Object["id"].(string)
	o, err := b.st.ObjectByURI(b.ctx, id)
	if err != nil {
		t.Fatalf("stored object %s: %v", id, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(o.Document, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tag", "attachment"} {
		if v, ok := act.Object[k]; ok && !reflect.DeepEqual(doc[k], v) {
			t.Fatalf("stored %s %v, sent %v", k, doc[k], v)
		}
	}
}

// replay posts the capture name, rewritten, signed by a test key of its
// actor, and returns its import outcome, or "http NNN" when the inbox does
// not answer 202. A follower, when given, follows the capture's actor first
// (unless it does already).
func (b *testBundle) replay(t *testing.T, name string, local, locals map[string]string, follower *store.Actor) string {
	t.Helper()
	body := b.rewritten(t, name, local, locals)
	r := b.remote.srv.URL
	var head struct {
		ID           string `json:"id"`
		Actor        any    `json:"actor"`
		AttributedTo string `json:"attributedTo"`
	}
	if err := json.Unmarshal([]byte(body), &head); err != nil {
		t.Fatal(err)
	}
	actor, _ := head.Actor.(string)
	if actor == "" {
		actor = head.AttributedTo // a bare object
	}
	path, ok := strings.CutPrefix(actor, r)
	if !ok {
		t.Fatalf("%s: actor %q not rewritten", name, actor)
	}
	b.remote.addPath(path, key(t, keyRemote))
	if follower != nil {
		var n int
		if err := b.db.Read.QueryRow(`SELECT COUNT(*) FROM following WHERE actor_id = ? AND target_uri = ?`, follower.ID, actor).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			b.follow(t, follower, actor)
		}
	}
	s := signer{keyID: actor + "#main-key", key: key(t, keyRemote)}
	status, resp := do(t, b.request(t, "/inbox", []byte(body), s))
	if status != http.StatusAccepted {
		t.Logf("%s: %d %s", name, status, resp)
		return "http " + strconv.Itoa(status)
	}
	b.drain(t)
	return b.outcome(t, head.ID)
}
