package activitypub

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
)

func TestKeysPEMRoundTrip(t *testing.T) {
	t.Parallel()
	key := testKey()
	if key.N.BitLen() != 2048 {
		t.Fatalf("key of %d bits", key.N.BitLen())
	}
	privPEM, err := EncodePrivateKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(privPEM, "-----BEGIN PRIVATE KEY-----") {
		t.Fatalf("private PEM: %.40s", privPEM)
	}
	back, err := ParsePrivateKeyPEM(privPEM)
	if err != nil || !back.Equal(key) {
		t.Fatalf("private round trip: %v", err)
	}
	pubPEM, err := EncodePublicKeyPEM(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pubPEM, "-----BEGIN PUBLIC KEY-----") {
		t.Fatalf("public PEM: %.40s", pubPEM)
	}
	pub, err := ParsePublicKeyPEM(pubPEM)
	if err != nil || !key.PublicKey.Equal(pub) {
		t.Fatalf("public round trip: %v", err)
	}
	// PKCS#1 forms.
	pkcs1 := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&key.PublicKey)}))
	if pub, err := ParsePublicKeyPEM(pkcs1); err != nil || !key.PublicKey.Equal(pub) {
		t.Fatalf("RSA PUBLIC KEY: %v", err)
	}
	mislabelled := strings.ReplaceAll(pkcs1, "RSA PUBLIC KEY", "PUBLIC KEY")
	if pub, err := ParsePublicKeyPEM(mislabelled); err != nil || !key.PublicKey.Equal(pub) {
		t.Fatalf("PKCS#1 labelled PUBLIC KEY: %v", err)
	}
	pkcs1Priv := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	if back, err := ParsePrivateKeyPEM(pkcs1Priv); err != nil || !back.Equal(key) {
		t.Fatalf("RSA PRIVATE KEY: %v", err)
	}
	// Ed25519 public keys are accepted (Misskey publishes them).
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	edPEM, err := EncodePublicKeyPEM(edPub)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParsePublicKeyPEM(edPEM); err != nil || !edPub.Equal(got) {
		t.Fatalf("ed25519: %v", err)
	}
}

func TestParseKeyPEMErrors(t *testing.T) {
	t.Parallel()
	// A 512-bit modulus (crypto/rsa no longer generates such keys).
	small := &rsa.PublicKey{N: new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), 511), big.NewInt(1)), E: 65537}
	smallDER, err := x509.MarshalPKIXPublicKey(small)
	if err != nil {
		t.Fatal(err)
	}
	_, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	edPrivPEM, _ := EncodePrivateKeyPEM(edPriv)
	for name, s := range map[string]string{
		"empty":         "",
		"not PEM":       "hello",
		"wrong type":    "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
		"garbage DER":   "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
		"512-bit RSA":   string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: smallDER})),
		"pkcs1 garbage": "-----BEGIN RSA PUBLIC KEY-----\nAAAA\n-----END RSA PUBLIC KEY-----\n",
	} {
		if _, err := ParsePublicKeyPEM(s); !errors.Is(err, ErrBadKey) {
			t.Errorf("public %s: got %v, want ErrBadKey", name, err)
		}
	}
	for name, s := range map[string]string{
		"empty":       "",
		"public":      "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
		"ed25519":     edPrivPEM,
		"garbage DER": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
	} {
		if _, err := ParsePrivateKeyPEM(s); !errors.Is(err, ErrBadKey) {
			t.Errorf("private %s: got %v, want ErrBadKey", name, err)
		}
	}
}

// TestParsePublicKeyPEMBounds: RSA keys beyond the sizes and exponents the
// fediverse uses are refused before any signature is checked with them,
// such as the 47,200-bit modulus with exponent 2^31-1 that cost 92-180 ms
// of CPU per unauthenticated request.
func TestParsePublicKeyPEMBounds(t *testing.T) {
	t.Parallel()
	// A modulus of the given size (not a product of primes: parsing never
	// looks, and verifying with it is what the bound prevents).
	rsaPEM := func(bits, e int) string {
		n := new(big.Int).Lsh(big.NewInt(1), uint(bits-1))
		n.Add(n, big.NewInt(0x1234567))
		der, err := x509.MarshalPKIXPublicKey(&rsa.PublicKey{N: n, E: e})
		if err != nil {
			t.Fatal(err)
		}
		return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	}
	for _, c := range []struct {
		bits, e int
		ok      bool
	}{
		{2048, 65537, true},
		{4096, 65537, true},
		{1024, 3, true},
		{4104, 65537, false},
		{8192, 65537, false},
		{16384, 65537, false},
		{47200, 1<<31 - 1, false},
		{2048, 1<<31 - 1, false},
		{2048, 65539, false},
		{2048, 65536, false},
		{2048, 1, false},
	} {
		_, err := ParsePublicKeyPEM(rsaPEM(c.bits, c.e))
		if c.ok && err != nil {
			t.Errorf("%d bits, e=%d: %v", c.bits, c.e, err)
		}
		if !c.ok && !errors.Is(err, ErrBadKey) {
			t.Errorf("%d bits, e=%d: got %v, want ErrBadKey", c.bits, c.e, err)
		}
	}
}

// TestParseMultikeyRSABounds: a FEP-521a RSA Multikey is held to the PEM
// path's bounds, 1024 to 4096 bits and an odd exponent of at most 65537 (a
// 23,792-bit key with e = 2^31-1 costs 37 to 130 times a 2048-bit key's
// verification).
func TestParseMultikeyRSABounds(t *testing.T) {
	t.Parallel()
	modulus := func(bits int) *big.Int { // odd, of exactly bits bits
		n := new(big.Int).Lsh(big.NewInt(1), uint(bits-1))
		return n.Add(n, big.NewInt(1))
	}
	for _, c := range []struct {
		bits, e int
		ok      bool
	}{
		{1024, 65537, true},
		{2048, 65537, true},
		{4096, 65537, true},
		{2048, 3, true},
		{1023, 65537, false},
		{4097, 65537, false},
		{23792, 65537, false},
		{23792, 1<<31 - 1, false},
		{2048, 1<<31 - 1, false},
		{2048, 65539, false},
		{2048, 65536, false},
		{2048, 1, false},
	} {
		mk, err := EncodeMultikey(&rsa.PublicKey{N: modulus(c.bits), E: c.e})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ParseMultikey(mk)
		if c.ok && err != nil {
			t.Errorf("%d bits, e=%d: %v", c.bits, c.e, err)
		}
		if !c.ok && !errors.Is(err, ErrBadKey) {
			t.Errorf("%d bits, e=%d: %v, want ErrBadKey", c.bits, c.e, err)
		}
		// The PEM path agrees.
		pem, err := EncodePublicKeyPEM(&rsa.PublicKey{N: modulus(c.bits), E: c.e})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParsePublicKeyPEM(pem); (err == nil) != c.ok {
			t.Errorf("PEM of %d bits, e=%d: %v", c.bits, c.e, err)
		}
	}
}
