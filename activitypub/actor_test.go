package activitypub

import (
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseActorFixtures(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/fediverse/*/objects/person*.json")
	if err != nil || len(files) < 10 {
		t.Fatalf("fixtures: %v (%d files)", err, len(files))
	}
	files = append(files, "testdata/fediverse/lemmy/objects/group.json")
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			data := readTestdata(t, strings.TrimPrefix(f, "testdata/"))
			a, err := ParseActor(data)
			if err != nil {
				t.Fatalf("ParseActor: %v", err)
			}
			var plain struct {
				ID        string `json:"id"`
				Inbox     string `json:"inbox"`
				Endpoints struct {
					SharedInbox string `json:"sharedInbox"`
				} `json:"endpoints"`
				PublicKey struct {
					ID           string `json:"id"`
					Owner        string `json:"owner"`
					PublicKeyPem string `json:"publicKeyPem"`
				} `json:"publicKey"`
			}
			if err := json.Unmarshal(data, &plain); err != nil {
				t.Fatal(err)
			}
			if a.ID != plain.ID || a.Inbox != plain.Inbox || a.SharedInbox != plain.Endpoints.SharedInbox {
				t.Errorf("id/inbox/shared = %q/%q/%q, want %q/%q/%q", a.ID, a.Inbox, a.SharedInbox, plain.ID, plain.Inbox, plain.Endpoints.SharedInbox)
			}
			if a.PublicKey.ID != plain.PublicKey.ID || a.PublicKey.PublicKeyPem != plain.PublicKey.PublicKeyPem {
				t.Errorf("publicKey = %+v", a.PublicKey)
			}
			if a.PublicKey.Owner != a.ID {
				t.Errorf("key owner %q != actor %q", a.PublicKey.Owner, a.ID)
			}
			pub, err := ParsePublicKeyPEM(a.PublicKey.PublicKeyPem)
			if err != nil {
				t.Fatalf("ParsePublicKeyPEM: %v", err)
			}
			if _, ok := pub.(*rsa.PublicKey); !ok {
				t.Errorf("key type %T", pub)
			}
			if k, ok := a.Key(plain.PublicKey.ID); !ok || k.ID != plain.PublicKey.ID {
				t.Errorf("Key(%q) not found", plain.PublicKey.ID)
			}
			if a.InboxFor() == "" {
				t.Errorf("no inbox to deliver to")
			}
		})
	}
}

func TestParseActorShapes(t *testing.T) {
	t.Parallel()
	t.Run("gotosocial", func(t *testing.T) {
		t.Parallel()
		a, err := ParseActor(readTestdata(t, "constructed/gotosocial_person.json"))
		if err != nil {
			t.Fatal(err)
		}
		if a.PublicKey.ID != "https://gts.example/users/alice/main-key" || !a.ManuallyApprovesFollowers || a.SharedInbox != "" {
			t.Errorf("actor = %+v", a)
		}
		if a.InboxFor() != a.Inbox {
			t.Errorf("InboxFor without shared inbox = %q", a.InboxFor())
		}
	})
	t.Run("misskey", func(t *testing.T) {
		t.Parallel()
		a, err := ParseActor(readTestdata(t, "constructed/misskey_person.json"))
		if err != nil {
			t.Fatal(err)
		}
		if a.Name != "" || a.SharedInbox != "https://mk.example/inbox" || len(a.PublicKeys) != 2 {
			t.Fatalf("actor = %+v", a)
		}
		k, ok := a.Key("https://mk.example/users/9xyz1abc2d#ed25519-key")
		if !ok {
			t.Fatal("ed25519 key not found")
		}
		pub, err := ParsePublicKeyPEM(k.PublicKeyPem)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := pub.(ed25519.PublicKey); !ok {
			t.Errorf("key type %T", pub)
		}
	})
	t.Run("key list, language map, inbox object, url links", func(t *testing.T) {
		t.Parallel()
		a, err := ParseActor(readTestdata(t, "constructed/keylist_person.json"))
		if err != nil {
			t.Fatal(err)
		}
		if a.Type != "Person" || a.Name != "Carol" || a.Inbox != "https://list.example/actor/carol/inbox" || a.URL != "https://list.example/@carol" {
			t.Errorf("actor = %+v", a)
		}
		if a.PublicKey.ID != "https://list.example/actor/carol#rsa" || a.PublicKey.Owner != a.ID || len(a.PublicKeys) != 2 {
			t.Errorf("keys = %+v / %+v", a.PublicKey, a.PublicKeys)
		}
		pub, err := ParsePublicKeyPEM(a.PublicKey.PublicKeyPem)
		if err != nil {
			t.Fatalf("PKCS#1 key: %v", err)
		}
		if _, ok := pub.(*rsa.PublicKey); !ok {
			t.Errorf("key type %T", pub)
		}
	})
	t.Run("standalone key document", func(t *testing.T) {
		t.Parallel()
		data := readTestdata(t, "constructed/key_document.json")
		if _, err := ParseActor(data); err == nil {
			t.Fatal("a key document parsed as an actor")
		}
		k, err := ParsePublicKeyDocument(data)
		if err != nil {
			t.Fatal(err)
		}
		if k.ID != "https://gts.example/users/alice/main-key" || k.Owner != "https://gts.example/users/alice" {
			t.Errorf("key = %+v", k)
		}
	})
}

func TestParseActorRequired(t *testing.T) {
	t.Parallel()
	for doc, field := range map[string]string{
		`{"type":"Person","inbox":"https://a/inbox"}`: "id",
		`{"id":"https://a","type":"Person"}`:          "inbox",
	} {
		_, err := ParseActor([]byte(doc))
		var mf *MissingFieldError
		if !errors.As(err, &mf) || mf.Field != field {
			t.Errorf("%s: got %v, want missing %s", doc, err, field)
		}
	}
	if _, err := ParsePublicKeyDocument([]byte(`{"id":"k","publicKeyPem":"x"}`)); err == nil {
		t.Error("key document without owner accepted")
	}
}

func TestMarshalActorDocumentRoundTrip(t *testing.T) {
	t.Parallel()
	pemStr, err := EncodePublicKeyPEM(&testKey().PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	in := &Actor{
		ID: "https://courier.example/users/alice", PreferredUsername: "alice", Name: "Alice <3",
		Inbox: "https://courier.example/users/alice/inbox", Outbox: "https://courier.example/users/alice/outbox",
		Followers: "https://courier.example/users/alice/followers", Following: "https://courier.example/users/alice/following",
		SharedInbox: "https://courier.example/inbox", PublicKey: PublicKey{PublicKeyPem: pemStr},
	}
	b, err := MarshalActorDocument(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"@context":["https://www.w3.org/ns/activitystreams","https://w3id.org/security/v1"`) ||
		!strings.Contains(string(b), `"endpoints":{"sharedInbox":"https://courier.example/inbox"}`) {
		t.Errorf("document: %s", b)
	}
	out, err := ParseActor(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.ID != in.ID || out.Type != "Person" || out.SharedInbox != in.SharedInbox || out.PublicKey.ID != in.ID+"#main-key" ||
		out.PublicKey.Owner != in.ID || out.PublicKey.PublicKeyPem != pemStr || out.Name != in.Name {
		t.Errorf("round trip: %+v", out)
	}
	if _, err := MarshalActorDocument(&Actor{ID: "x"}); !errors.Is(err, ErrBuild) {
		t.Errorf("actor without inbox: %v", err)
	}
}
