package activitypub

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gowebpki/jcs"
)

// FEP-8b32 object integrity proofs with the eddsa-jcs-2022 cryptosuite (W3C
// Data Integrity EdDSA Cryptosuites v1.0): a document carries, under
// "proof", a DataIntegrityProof whose proofValue is "z" + base58btc of the
// Ed25519 signature of SHA-256(JCS(proof options)) || SHA-256(JCS(document
// without proof)), where the proof options are the proof without its
// proofValue, with the document's @context. JCS is RFC 8785, done by
// github.com/gowebpki/jcs (its numbers are written as ECMAScript writes
// them, which a hand-written canonicalizer easily gets wrong).

// Proof vocabulary.
const (
	// DataIntegrityContext is the JSON-LD context that defines proof and
	// DataIntegrityProof; courier adds it to the @context of what it signs.
	DataIntegrityContext = "https://w3id.org/security/data-integrity/v1"
	// ProofType is the type of a Data Integrity proof.
	ProofType = "DataIntegrityProof"
	// CryptosuiteEdDSAJCS is the one cryptosuite courier signs and
	// verifies.
	CryptosuiteEdDSAJCS = "eddsa-jcs-2022"
	// ProofPurposeAssertion is the proofPurpose FEP-8b32 requires.
	ProofPurposeAssertion = "assertionMethod"
)

// ErrProof is returned (wrapped, with the reason) when a document's
// integrity proof is malformed or does not verify.
var ErrProof = errors.New("activitypub: integrity proof does not verify")

// maxProofs bounds the proofs of one document that are looked at.
const maxProofs = 4

// maxProofValue bounds a proofValue: an Ed25519 signature is 64 bytes, at
// most 88 base58 characters.
const maxProofValue = 100

// Proof is a DataIntegrityProof as a document carries it.
type Proof struct {
	Type               string `json:"type"`
	Cryptosuite        string `json:"cryptosuite"`
	VerificationMethod string `json:"verificationMethod"`
	ProofPurpose       string `json:"proofPurpose"`
	ProofValue         string `json:"proofValue,omitempty"`
	Created            string `json:"created,omitempty"`

	// raw is the proof as received (verification hashes all of its
	// properties but proofValue, known or not).
	raw map[string]json.RawMessage
}

// EdDSAJCS reports whether p is a proof courier can verify: a
// DataIntegrityProof of the eddsa-jcs-2022 cryptosuite.
func (p *Proof) EdDSAJCS() bool {
	return p.Type == ProofType && p.Cryptosuite == CryptosuiteEdDSAJCS
}

// WithDataIntegrity returns the @context value c (nil: ActivityStreams
// alone) with DataIntegrityContext in it, right after its first entry so
// that entries after it (a client's own terms) keep their precedence. c is
// not modified.
func WithDataIntegrity(c any) any {
	switch v := c.(type) {
	case nil:
		return []any{ActivityStreams, DataIntegrityContext}
	case string:
		if v == DataIntegrityContext {
			return v
		}
		return []any{v, DataIntegrityContext}
	case []any:
		if slices.Contains(v, any(DataIntegrityContext)) {
			return v
		}
		if len(v) == 0 {
			return []any{ActivityStreams, DataIntegrityContext}
		}
		out := make([]any, 0, len(v)+1)
		out = append(out, v[0], DataIntegrityContext)
		return append(out, v[1:]...)
	case []string:
		out := make([]any, len(v))
		for i, s := range v {
			out[i] = s
		}
		return WithDataIntegrity(out)
	}
	return []any{c, DataIntegrityContext}
}

// AddProof returns doc, a JSON object without a "proof" in the compact form
// NewActivity writes, with an eddsa-jcs-2022 proof made with key appended
// as its last property: verificationMethod keyID, created at the second.
// Ed25519 signatures are deterministic, so the same inputs give the same
// bytes. The document's @context should define proof (WithDataIntegrity).
func AddProof(doc []byte, keyID string, key ed25519.PrivateKey, created time.Time) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize || keyID == "" {
		return nil, fmt.Errorf("%w: proof: no Ed25519 key", ErrBuild)
	}
	trimmed := bytes.TrimRight(doc, " \t\r\n")
	if len(trimmed) < 2 || trimmed[0] != '{' || trimmed[len(trimmed)-1] != '}' {
		return nil, fmt.Errorf("%w: proof: not a JSON object", ErrBuild)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return nil, fmt.Errorf("%w: proof: %v", ErrBuild, err)
	}
	if _, ok := fields["proof"]; ok {
		return nil, fmt.Errorf("%w: proof: the document has one already", ErrBuild)
	}
	p := Proof{
		Type: ProofType, Cryptosuite: CryptosuiteEdDSAJCS, VerificationMethod: keyID,
		ProofPurpose: ProofPurposeAssertion, Created: created.UTC().Truncate(time.Second).Format(time.RFC3339),
	}
	options, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("%w: proof: %v", ErrBuild, err)
	}
	h, err := proofHash(fields["@context"], options, trimmed)
	if err != nil {
		return nil, fmt.Errorf("%w: proof: %v", ErrBuild, err)
	}
	p.ProofValue = "z" + encodeBase58(ed25519.Sign(key, h))
	pb, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("%w: proof: %v", ErrBuild, err)
	}
	out := make([]byte, 0, len(trimmed)+len(pb)+10)
	out = append(out, trimmed[:len(trimmed)-1]...)
	if len(fields) > 0 {
		out = append(out, ',')
	}
	out = append(out, `"proof":`...)
	out = append(out, pb...)
	return append(out, '}'), nil
}

// Proofs returns the proofs doc carries under "proof" (see ParseProofs).
func Proofs(doc []byte) ([]Proof, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(doc, &fields); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return ParseProofs(fields["proof"])
}

// ParseProofs reads the value of a "proof" property (Activity.Proof): one
// proof object or a list of them; nil when raw is empty or null. Anything
// else, or more than maxProofs proofs, gives an error matching ErrProof.
func ParseProofs(raw json.RawMessage) ([]Proof, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []json.RawMessage
	if raw[0] == '[' {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("%w: proof: %v", ErrProof, err)
		}
	} else {
		list = []json.RawMessage{raw}
	}
	if len(list) > maxProofs {
		return nil, fmt.Errorf("%w: %d proofs, at most %d", ErrProof, len(list), maxProofs)
	}
	out := make([]Proof, 0, len(list))
	for _, r := range list {
		var p Proof
		if err := json.Unmarshal(r, &p.raw); err != nil || p.raw == nil {
			return nil, fmt.Errorf("%w: proof is not a JSON object", ErrProof)
		}
		for k, v := range p.raw {
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				continue // not a string: not one of ours, hashed as it is
			}
			switch k {
			case "type":
				p.Type = s
			case "cryptosuite":
				p.Cryptosuite = s
			case "verificationMethod":
				p.VerificationMethod = s
			case "proofPurpose":
				p.ProofPurpose = s
			case "proofValue":
				p.ProofValue = s
			case "created":
				p.Created = s
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// VerifyProof verifies the eddsa-jcs-2022 proof p of doc (one of
// Proofs(doc)) with pub, the key its verificationMethod names: the proof's
// type, cryptosuite and purpose, then the signature over the document
// without its proofs and without an LD signature ("signature", which
// FEP-8b32 says is made after the proof). When the proof carries an
// @context, the document's must begin with it. Failures match ErrProof.
func VerifyProof(doc []byte, p Proof, pub ed25519.PublicKey) error {
	switch {
	case p.Type != ProofType:
		return fmt.Errorf("%w: type %q, not %s", ErrProof, p.Type, ProofType)
	case p.Cryptosuite != CryptosuiteEdDSAJCS:
		return fmt.Errorf("%w: cryptosuite %q, not %s", ErrProof, p.Cryptosuite, CryptosuiteEdDSAJCS)
	case p.ProofPurpose != ProofPurposeAssertion:
		return fmt.Errorf("%w: proofPurpose %q, not %s", ErrProof, p.ProofPurpose, ProofPurposeAssertion)
	case len(p.ProofValue) < 2 || len(p.ProofValue) > maxProofValue || p.ProofValue[0] != 'z':
		return fmt.Errorf("%w: proofValue is not a base58btc signature", ErrProof)
	case len(pub) != ed25519.PublicKeySize:
		return fmt.Errorf("%w: not an Ed25519 key", ErrProof)
	}
	sig, err := decodeBase58(p.ProofValue[1:])
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: proofValue is not an Ed25519 signature", ErrProof)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(doc, &fields); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	docContext := fields["@context"]
	delete(fields, "proof")
	delete(fields, "signature")
	options := make(map[string]json.RawMessage, len(p.raw))
	for k, v := range p.raw {
		if k != "proofValue" {
			options[k] = v
		}
	}
	if pc, ok := options["@context"]; ok {
		if !contextPrefix(pc, docContext) {
			return fmt.Errorf("%w: the proof's @context does not begin the document's", ErrProof)
		}
		docContext = pc
		fields["@context"] = pc
	}
	unsecured, err := json.Marshal(fields)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	optionsJSON, err := json.Marshal(options)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	h, err := proofHash(docContext, optionsJSON, unsecured)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrProof, err)
	}
	if !ed25519.Verify(pub, h, sig) {
		return fmt.Errorf("%w: the signature does not match the document (changed after signing, or another key)", ErrProof)
	}
	return nil
}

// proofHash returns SHA-256(JCS(options with @context docContext)) ||
// SHA-256(JCS(unsecured)), the data eddsa-jcs-2022 signs. options is a JSON
// object without proofValue; docContext is the document's @context (none
// when empty).
func proofHash(docContext json.RawMessage, options, unsecured []byte) ([]byte, error) {
	if len(docContext) > 0 {
		var o map[string]json.RawMessage
		if err := json.Unmarshal(options, &o); err != nil {
			return nil, err
		}
		o["@context"] = docContext
		b, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		options = b
	}
	co, err := jcs.Transform(options)
	if err != nil {
		return nil, fmt.Errorf("canonicalize the proof options: %v", err)
	}
	cd, err := jcs.Transform(unsecured)
	if err != nil {
		return nil, fmt.Errorf("canonicalize the document: %v", err)
	}
	ho, hd := sha256.Sum256(co), sha256.Sum256(cd)
	return append(ho[:], hd[:]...), nil
}

// contextPrefix reports whether the @context proof is the @context doc or
// begins it (both read as lists).
func contextPrefix(proof, doc json.RawMessage) bool {
	list := func(r json.RawMessage) ([]json.RawMessage, bool) {
		r = bytes.TrimSpace(r)
		if len(r) == 0 {
			return nil, false
		}
		if r[0] != '[' {
			return []json.RawMessage{r}, true
		}
		var l []json.RawMessage
		return l, json.Unmarshal(r, &l) == nil
	}
	p, ok1 := list(proof)
	d, ok2 := list(doc)
	if !ok1 || !ok2 || len(p) > len(d) {
		return false
	}
	for i := range p {
		a, err1 := jcs.Transform(p[i])
		b, err2 := jcs.Transform(d[i])
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			return false
		}
	}
	return true
}
