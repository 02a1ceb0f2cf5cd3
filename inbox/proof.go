package inbox

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/courier-ap/courier/activitypub"
)

// checkProofs verifies the FEP-8b32 integrity proofs body carries (act is
// body parsed): every eddsa-jcs-2022 proof must verify with the Ed25519 key
// its verificationMethod names, resolved as a signature's key is (budgeted,
// cached, refetched once when it fails against a cached key). Proofs of
// other cryptosuites, and proofs whose verificationMethod is no http(s) URL
// (a DID), are not judged. It reports whether one of them is made
// with a key of the activity's actor: such an activity speaks for its actor
// whoever delivered it (a forward, a relay), without fetching it again from
// its origin. A malformed or failing proof refuses the request (401,
// "bad_proof", naming the reason); a key courier cannot resolve now defers
// it (503).
func (h *Handler) checkProofs(ctx context.Context, refs *urls, body []byte, act *activitypub.Activity) (bool, error) {
	if act.Proof == nil {
		return false, nil
	}
	proofs, err := activitypub.ParseProofs(act.Proof)
	if err != nil {
		return false, err
	}
	byActor := false
	for _, p := range proofs {
		if !p.EdDSAJCS() {
			continue
		}
		vm := p.VerificationMethod
		if _, ok := refs.origin(vm); !ok {
			continue // a DID (FEP-ef61) or worse: not resolvable here, not judged
		}
		if err := h.checkDomain(ctx, refs.hostOf(vm)); err != nil {
			return false, err
		}
		k, err := h.proofKey(ctx, body, p)
		if err != nil {
			return false, err
		}
		if v, ok := h.cfg.Resolver.(interface {
			Verified(ctx context.Context, keyID string)
		}); ok {
			v.Verified(ctx, vm)
		}
		if k.owner == act.Actor {
			byActor = true
		}
	}
	return byActor, nil
}

// proofKey resolves the key of proof p and verifies p over body with it;
// a failure against a cached key is checked once more against the key
// fetched again (the actor may have rotated it).
func (h *Handler) proofKey(ctx context.Context, body []byte, p activitypub.Proof) (cachedKey, error) {
	vm := p.VerificationMethod
	k, err := h.key(ctx, vm, false)
	if err != nil {
		return cachedKey{}, fmt.Errorf("integrity proof: %w", err)
	}
	err = verifyProofWith(body, p, k)
	if errors.Is(err, activitypub.ErrProof) {
		fresh, ferr := h.key(ctx, vm, true)
		if ferr != nil {
			if d := deferral(ferr); d != nil {
				return cachedKey{}, d
			}
			return cachedKey{}, err
		}
		if fresh.pub != nil && !samePublicKey(fresh.pub, k.pub) {
			k, err = fresh, verifyProofWith(body, p, fresh)
		}
	}
	if err != nil {
		return cachedKey{}, err
	}
	return k, nil
}

func verifyProofWith(body []byte, p activitypub.Proof, k cachedKey) error {
	pub, ok := k.pub.(ed25519.PublicKey)
	if !ok {
		return fmt.Errorf("%w: verificationMethod %s is not an Ed25519 key", activitypub.ErrProof, p.VerificationMethod)
	}
	return activitypub.VerifyProof(body, p, pub)
}
