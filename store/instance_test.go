package store

import (
	"context"
	"sync"
	"testing"

	"github.com/courier-ap/courier/activitypub"
)

func TestInstanceActorCreatedOnceAndServedWithItsKey(t *testing.T) {
	t.Parallel()
	st := setup(t).store
	ctx := context.Background()

	// Two concurrent first uses (server and worker starting together) end
	// with one key.
	var wg sync.WaitGroup
	keys := make([]string, 4)
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst, err := st.InstanceActor(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = inst.PublicKeyPEM
		}()
	}
	wg.Wait()
	for _, k := range keys[1:] {
		if k != keys[0] {
			t.Fatal("instance actor got more than one key")
		}
	}

	inst, err := st.InstanceActor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := st.InstanceDocument(inst)
	if err != nil {
		t.Fatal(err)
	}
	a, err := activitypub.ParseActor(doc)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != st.URIs().Base+"/actor" || a.Type != "Application" {
		t.Fatalf("instance actor id %q type %q", a.ID, a.Type)
	}
	if a.PublicKey.ID != inst.Signer().KeyID || a.PublicKey.PublicKeyPem != inst.PublicKeyPEM {
		t.Fatalf("document key %q does not match the signer's %q", a.PublicKey.ID, inst.Signer().KeyID)
	}
	pub, err := activitypub.ParsePublicKeyPEM(a.PublicKey.PublicKeyPem)
	if err != nil {
		t.Fatal(err)
	}
	if !inst.Key.PublicKey.Equal(pub) {
		t.Fatal("served public key is not the signing key's")
	}
}
