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
