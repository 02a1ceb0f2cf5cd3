package activitypub

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// KeyBits is the size of the RSA keys courier generates.
const KeyBits = 2048

// Bounds on the RSA public keys courier accepts from remote actors. The
// fediverse publishes 2048- to 4096-bit keys with exponent 65537; the cost
// of checking a signature grows with the modulus and the exponent, so a
// key beyond these bounds would let any sender buy CPU before the 401.
const (
	// MinRemoteKeyBits is the smallest RSA modulus accepted (the
	// draft-cavage test vectors use 1024 bits).
	MinRemoteKeyBits = 1024
	// MaxRemoteKeyBits is the largest RSA modulus accepted.
	MaxRemoteKeyBits = 4096
	// MaxRemoteKeyExponent is the largest RSA public exponent accepted
	// (F4, the exponent every fediverse server uses).
	MaxRemoteKeyExponent = 65537
)

// ErrBadKey is returned (wrapped) when a PEM block or key cannot be used.
var ErrBadKey = errors.New("activitypub: unusable key")

// GenerateKey generates an RSA-2048 key for a local actor.
func GenerateKey() (*rsa.PrivateKey, error) {
	k, err := rsa.GenerateKey(rand.Reader, KeyBits)
	if err != nil {
		return nil, fmt.Errorf("activitypub: generate key: %w", err)
	}
	return k, nil
}

// EncodePublicKeyPEM encodes a public key as an SPKI "PUBLIC KEY" PEM block,
// the form actor documents publish.
func EncodePublicKeyPEM(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("%w: encode public key: %v", ErrBadKey, err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), nil
}

// EncodePrivateKeyPEM encodes a private key as a PKCS#8 "PRIVATE KEY" PEM block.
func EncodePrivateKeyPEM(key crypto.PrivateKey) (string, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", fmt.Errorf("%w: encode private key: %v", ErrBadKey, err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), nil
}

// ParsePrivateKeyPEM decodes an RSA private key from a PKCS#8 "PRIVATE KEY"
// or PKCS#1 "RSA PRIVATE KEY" PEM block.
func ParsePrivateKeyPEM(s string) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return nil, fmt.Errorf("%w: no PEM block", ErrBadKey)
	}
	switch block.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadKey, err)
		}
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("%w: %T is not an RSA key", ErrBadKey, k)
		}
		return rk, nil
	case "RSA PRIVATE KEY":
		k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadKey, err)
		}
		return k, nil
	}
	return nil, fmt.Errorf("%w: PEM type %q", ErrBadKey, block.Type)
}

// ParsePublicKeyPEM decodes a public key from an SPKI "PUBLIC KEY" block
// (RSA or Ed25519) or a PKCS#1 "RSA PUBLIC KEY" block, as remote actors
// publish them. RSA keys outside MinRemoteKeyBits..MaxRemoteKeyBits, or
// whose exponent is even, below 3 or above MaxRemoteKeyExponent, are refused.
func ParsePublicKeyPEM(s string) (crypto.PublicKey, error) {
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return nil, fmt.Errorf("%w: no PEM block", ErrBadKey)
	}
	var pub crypto.PublicKey
	switch block.Type {
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			// Some servers label a PKCS#1 key "PUBLIC KEY".
			if k1, err1 := x509.ParsePKCS1PublicKey(block.Bytes); err1 == nil {
				k, err = k1, nil
			} else {
				return nil, fmt.Errorf("%w: %v", ErrBadKey, err)
			}
		}
		pub = k
	case "RSA PUBLIC KEY":
		k, err := x509.ParsePKCS1PublicKey(block.Bytes)
		if err != nil {
			if k8, err8 := x509.ParsePKIXPublicKey(block.Bytes); err8 == nil {
				pub = k8
				break
			}
			return nil, fmt.Errorf("%w: %v", ErrBadKey, err)
		}
		pub = k
	default:
		return nil, fmt.Errorf("%w: PEM type %q", ErrBadKey, block.Type)
	}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if err := checkRemoteRSA(k); err != nil {
			return nil, err
		}
		return k, nil
	case ed25519.PublicKey:
		return k, nil
	}
	return nil, fmt.Errorf("%w: unsupported key type %T", ErrBadKey, pub)
}

// checkRemoteRSA refuses an RSA key outside what the fediverse publishes
// (MinRemoteKeyBits to MaxRemoteKeyBits, an odd exponent of at most
// MaxRemoteKeyExponent), whatever encoding carried it (PEM or Multikey):
// each verification with a larger key or exponent costs more CPU.
func checkRemoteRSA(k *rsa.PublicKey) error {
	if n := k.N.BitLen(); n < MinRemoteKeyBits || n > MaxRemoteKeyBits {
		return fmt.Errorf("%w: RSA key of %d bits (accepted: %d to %d)", ErrBadKey, n, MinRemoteKeyBits, MaxRemoteKeyBits)
	}
	if k.E < 3 || k.E > MaxRemoteKeyExponent || k.E%2 == 0 {
		return fmt.Errorf("%w: RSA exponent %d (accepted: odd, 3 to %d)", ErrBadKey, k.E, MaxRemoteKeyExponent)
	}
	return nil
}
