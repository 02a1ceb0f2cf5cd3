package activitypub

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math/big"
)

// FEP-521a: an actor publishes further keys as Multikey entries of
// assertionMethod, an Ed25519 public key written as publicKeyMultibase:
// "z" (base58btc) over the multicodec prefix 0xed 0x01 and the 32 key bytes.

// MultikeyContext is the JSON-LD context that defines Multikey,
// assertionMethod and publicKeyMultibase.
const MultikeyContext = "https://w3id.org/security/multikey/v1"

// Ed25519KeyID returns the id courier gives the Ed25519 key of its actor
// actorURI: {actor}#ed25519-key.
func Ed25519KeyID(actorURI string) string { return actorURI + "#ed25519-key" }

// Multikey is an assertionMethod entry of an actor document.
type Multikey struct {
	// ID is the key id, the keyid of signatures made with it.
	ID string `json:"id"`
	// Type is "Multikey".
	Type string `json:"type"`
	// Controller is the id of the actor owning the key.
	Controller string `json:"controller"`
	// PublicKeyMultibase is the key (see EncodeEd25519Multibase).
	PublicKeyMultibase string `json:"publicKeyMultibase"`
}

// NewEd25519Multikey returns the Multikey entry publishing pub as id,
// controlled by controller.
func NewEd25519Multikey(id, controller string, pub ed25519.PublicKey) Multikey {
	return Multikey{ID: id, Type: "Multikey", Controller: controller, PublicKeyMultibase: EncodeEd25519Multibase(pub)}
}

// ed25519Multicodec is the multicodec prefix of an Ed25519 public key.
var ed25519Multicodec = [2]byte{0xed, 0x01}

// EncodeEd25519Multibase writes pub as a publicKeyMultibase value.
func EncodeEd25519Multibase(pub ed25519.PublicKey) string {
	b := make([]byte, 0, 2+len(pub))
	b = append(b, ed25519Multicodec[:]...)
	b = append(b, pub...)
	return "z" + base58Encode(b)
}

// ParseEd25519Multibase reads an Ed25519 public key from a
// publicKeyMultibase value. Errors wrap ErrBadKey.
func ParseEd25519Multibase(s string) (ed25519.PublicKey, error) {
	if len(s) < 2 || len(s) > 64 || s[0] != 'z' {
		return nil, fmt.Errorf("%w: publicKeyMultibase is not base58btc", ErrBadKey)
	}
	b, err := base58Decode(s[1:])
	if err != nil {
		return nil, fmt.Errorf("%w: publicKeyMultibase: %v", ErrBadKey, err)
	}
	if len(b) != 2+ed25519.PublicKeySize || b[0] != ed25519Multicodec[0] || b[1] != ed25519Multicodec[1] {
		return nil, fmt.Errorf("%w: publicKeyMultibase is not an Ed25519 key", ErrBadKey)
	}
	return ed25519.PublicKey(b[2:]), nil
}

// GenerateEd25519Key generates an Ed25519 key for a local actor.
func GenerateEd25519Key() (ed25519.PrivateKey, error) {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("activitypub: generate Ed25519 key: %w", err)
	}
	return k, nil
}

// parseMultikeys reads the Ed25519 Multikey entries of an assertionMethod
// property (one object or a list) as keys whose PEM is the SPKI encoding
// of the key, so that KeyOf resolves them like any publicKey; the
// controller is the owner. Entries of another type or key are skipped.
func parseMultikeys(raw json.RawMessage) []PublicKey {
	var out []PublicKey
	for _, it := range objectItems(raw) {
		var w struct {
			ID                 json.RawMessage `json:"id"`
			Type               json.RawMessage `json:"type"`
			Controller         json.RawMessage `json:"controller"`
			PublicKeyMultibase json.RawMessage `json:"publicKeyMultibase"`
		}
		it = bytes.TrimSpace(it)
		if len(it) == 0 || it[0] != '{' || json.Unmarshal(it, &w) != nil || firstString(w.Type) != "Multikey" {
			continue
		}
		pub, err := ParseEd25519Multibase(firstString(w.PublicKeyMultibase))
		if err != nil {
			continue
		}
		pemText, err := EncodePublicKeyPEM(pub)
		if err != nil {
			continue
		}
		out = append(out, PublicKey{ID: firstString(w.ID), Owner: firstID(w.Controller), PublicKeyPem: pemText})
	}
	return out
}

const base58Alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

func base58Encode(b []byte) string {
	n := new(big.Int).SetBytes(b)
	base, mod := big.NewInt(58), new(big.Int)
	var out []byte
	for n.Sign() > 0 {
		n.DivMod(n, base, mod)
		out = append(out, base58Alphabet[mod.Int64()])
	}
	for _, c := range b {
		if c != 0 {
			break
		}
		out = append(out, '1')
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return string(out)
}

func base58Decode(s string) ([]byte, error) {
	n, base := new(big.Int), big.NewInt(58)
	zeros := 0
	for zeros < len(s) && s[zeros] == '1' {
		zeros++
	}
	for k := 0; k < len(s); k++ {
		d := -1
		for j := 0; j < len(base58Alphabet); j++ {
			if base58Alphabet[j] == s[k] {
				d = j
				break
			}
		}
		if d < 0 {
			return nil, fmt.Errorf("character %q is not base58", s[k])
		}
		n.Mul(n, base).Add(n, big.NewInt(int64(d)))
	}
	return append(make([]byte, zeros), n.Bytes()...), nil
}
