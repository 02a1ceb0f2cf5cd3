package activitypub

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"math/big"
)

// FEP-521a: an actor publishes further keys as Multikey entries of
// assertionMethod, the key written as publicKeyMultibase: "z" (base58btc)
// over a multicodec prefix and the key bytes. courier publishes each local
// actor's Ed25519 key this way, beside the RSA publicKey.

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

// EncodeEd25519Multibase writes pub as a publicKeyMultibase value.
func EncodeEd25519Multibase(pub ed25519.PublicKey) string {
	return "z" + encodeBase58(append(append([]byte{}, prefixEd25519...), pub...))
}

// ParseEd25519Multibase reads an Ed25519 public key from a
// publicKeyMultibase value; any other key is refused. Errors wrap
// ErrBadKey.
func ParseEd25519Multibase(s string) (ed25519.PublicKey, error) {
	pub, err := ParseMultikey(s)
	if err != nil {
		return nil, err
	}
	k, ok := pub.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w: publicKeyMultibase is not an Ed25519 key", ErrBadKey)
	}
	return k, nil
}

// GenerateEd25519Key generates an Ed25519 key for a local actor.
func GenerateEd25519Key() (ed25519.PrivateKey, error) {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("activitypub: generate Ed25519 key: %w", err)
	}
	return k, nil
}

// Multicodec prefixes (unsigned varints) of the public keys FEP-521a
// Multikeys carry: ed25519-pub (0xed) and rsa-pub (0x1205, PKCS#1 DER).
var (
	prefixEd25519 = []byte{0xed, 0x01}
	prefixRSA     = []byte{0x85, 0x24}
)

// maxMultibase bounds a publicKeyMultibase value (an RSA-8192 key is about
// 1.4 kB in base58).
const maxMultibase = 4096

// ParseMultikey decodes a FEP-521a Multikey's publicKeyMultibase: base58btc
// ("z" prefix) of a multicodec-tagged Ed25519 or RSA public key. RSA keys
// outside the PEM path's bounds (MinRemoteKeyBits to MaxRemoteKeyBits, an
// odd exponent of at most MaxRemoteKeyExponent) and anything else give an
// error matching ErrBadKey.
func ParseMultikey(s string) (crypto.PublicKey, error) {
	if len(s) < 2 || s[0] != 'z' {
		return nil, fmt.Errorf("%w: multibase: not base58btc", ErrBadKey)
	}
	if len(s) > maxMultibase {
		return nil, fmt.Errorf("%w: multibase: %d characters", ErrBadKey, len(s))
	}
	raw, err := decodeBase58(s[1:])
	if err != nil {
		return nil, fmt.Errorf("%w: multibase: %v", ErrBadKey, err)
	}
	switch {
	case hasPrefix(raw, prefixEd25519):
		k := raw[len(prefixEd25519):]
		if len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: Ed25519 multikey of %d bytes", ErrBadKey, len(k))
		}
		return ed25519.PublicKey(k), nil
	case hasPrefix(raw, prefixRSA):
		k, err := x509.ParsePKCS1PublicKey(raw[len(prefixRSA):])
		if err != nil {
			return nil, fmt.Errorf("%w: RSA multikey: %v", ErrBadKey, err)
		}
		if err := checkRemoteRSA(k); err != nil {
			return nil, fmt.Errorf("RSA multikey: %w", err)
		}
		return k, nil
	}
	return nil, fmt.Errorf("%w: multikey of an unsupported codec", ErrBadKey)
}

// EncodeMultikey encodes an Ed25519 or RSA public key as a
// publicKeyMultibase value (the inverse of ParseMultikey).
func EncodeMultikey(pub crypto.PublicKey) (string, error) {
	var raw []byte
	switch k := pub.(type) {
	case ed25519.PublicKey:
		raw = append(append(raw, prefixEd25519...), k...)
	case *rsa.PublicKey:
		raw = append(append(raw, prefixRSA...), x509.MarshalPKCS1PublicKey(k)...)
	default:
		return "", fmt.Errorf("%w: multikey of %T", ErrBadKey, pub)
	}
	return "z" + encodeBase58(raw), nil
}

func hasPrefix(b, p []byte) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == string(p)
}

const base58Alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

var base58Index = func() (idx [256]int8) {
	for i := range idx {
		idx[i] = -1
	}
	for i := 0; i < len(base58Alphabet); i++ {
		idx[base58Alphabet[i]] = int8(i)
	}
	return idx
}()

// decodeBase58 decodes Bitcoin-alphabet base58 (leading '1's are zero bytes).
func decodeBase58(s string) ([]byte, error) {
	zeros := 0
	for zeros < len(s) && s[zeros] == '1' {
		zeros++
	}
	n := new(big.Int)
	radix := big.NewInt(58)
	for i := zeros; i < len(s); i++ {
		d := base58Index[s[i]]
		if d < 0 {
			return nil, fmt.Errorf("invalid base58 character %q", s[i])
		}
		n.Mul(n, radix)
		n.Add(n, big.NewInt(int64(d)))
	}
	return append(make([]byte, zeros), n.Bytes()...), nil
}

// encodeBase58 encodes b in Bitcoin-alphabet base58.
func encodeBase58(b []byte) string {
	zeros := 0
	for zeros < len(b) && b[zeros] == 0 {
		zeros++
	}
	n := new(big.Int).SetBytes(b)
	radix, mod := big.NewInt(58), new(big.Int)
	var out []byte
	for n.Sign() > 0 {
		n.DivMod(n, radix, mod)
		out = append(out, base58Alphabet[mod.Int64()])
	}
	for range zeros {
		out = append(out, '1')
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return string(out)
}
