package activitypub

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The RFC 9421 Appendix B test keys (B.1), request (B.2) and signatures.
const (
	rfcKeyRSAPublic = `-----BEGIN RSA PUBLIC KEY-----
MIIBCgKCAQEAhAKYdtoeoy8zcAcR874L8cnZxKzAGwd7v36APp7Pv6Q2jdsPBRrw
WEBnez6d0UDKDwGbc6nxfEXAy5mbhgajzrw3MOEt8uA5txSKobBpKDeBLOsdJKFq
MGmXCQvEG7YemcxDTRPxAleIAgYYRjTSd/QBwVW9OwNFhekro3RtlinV0a75jfZg
kne/YiktSvLG34lw2zqXBDTC5NHROUqGTlML4PlNZS5Ri2U4aCNx2rUPRcKIlE0P
uKxI4T+HIaFpv8+rdV6eUgOrB2xeI1dSFFn/nnv5OoZJEIB+VmuKn3DCUcCZSFlQ
PSXSfBDiUGhwOw76WuSSsf1D4b/vLoJ10wIDAQAB
-----END RSA PUBLIC KEY-----`
	rfcKeyRSAPrivate = `-----BEGIN RSA PRIVATE KEY-----
MIIEqAIBAAKCAQEAhAKYdtoeoy8zcAcR874L8cnZxKzAGwd7v36APp7Pv6Q2jdsP
BRrwWEBnez6d0UDKDwGbc6nxfEXAy5mbhgajzrw3MOEt8uA5txSKobBpKDeBLOsd
JKFqMGmXCQvEG7YemcxDTRPxAleIAgYYRjTSd/QBwVW9OwNFhekro3RtlinV0a75
jfZgkne/YiktSvLG34lw2zqXBDTC5NHROUqGTlML4PlNZS5Ri2U4aCNx2rUPRcKI
lE0PuKxI4T+HIaFpv8+rdV6eUgOrB2xeI1dSFFn/nnv5OoZJEIB+VmuKn3DCUcCZ
SFlQPSXSfBDiUGhwOw76WuSSsf1D4b/vLoJ10wIDAQABAoIBAG/JZuSWdoVHbi56
vjgCgkjg3lkO1KrO3nrdm6nrgA9P9qaPjxuKoWaKO1cBQlE1pSWp/cKncYgD5WxE
CpAnRUXG2pG4zdkzCYzAh1i+c34L6oZoHsirK6oNcEnHveydfzJL5934egm6p8DW
+m1RQ70yUt4uRc0YSor+q1LGJvGQHReF0WmJBZHrhz5e63Pq7lE0gIwuBqL8SMaA
yRXtK+JGxZpImTq+NHvEWWCu09SCq0r838ceQI55SvzmTkwqtC+8AT2zFviMZkKR
Qo6SPsrqItxZWRty2izawTF0Bf5S2VAx7O+6t3wBsQ1sLptoSgX3QblELY5asI0J
YFz7LJECgYkAsqeUJmqXE3LP8tYoIjMIAKiTm9o6psPlc8CrLI9CH0UbuaA2JCOM
cCNq8SyYbTqgnWlB9ZfcAm/cFpA8tYci9m5vYK8HNxQr+8FS3Qo8N9RJ8d0U5Csw
DzMYfRghAfUGwmlWj5hp1pQzAuhwbOXFtxKHVsMPhz1IBtF9Y8jvgqgYHLbmyiu1
mwJ5AL0pYF0G7x81prlARURwHo0Yf52kEw1dxpx+JXER7hQRWQki5/NsUEtv+8RT
qn2m6qte5DXLyn83b1qRscSdnCCwKtKWUug5q2ZbwVOCJCtmRwmnP131lWRYfj67
B/xJ1ZA6X3GEf4sNReNAtaucPEelgR2nsN0gKQKBiGoqHWbK1qYvBxX2X3kbPDkv
9C+celgZd2PW7aGYLCHq7nPbmfDV0yHcWjOhXZ8jRMjmANVR/eLQ2EfsRLdW69bn
f3ZD7JS1fwGnO3exGmHO3HZG+6AvberKYVYNHahNFEw5TsAcQWDLRpkGybBcxqZo
81YCqlqidwfeO5YtlO7etx1xLyqa2NsCeG9A86UjG+aeNnXEIDk1PDK+EuiThIUa
/2IxKzJKWl1BKr2d4xAfR0ZnEYuRrbeDQYgTImOlfW6/GuYIxKYgEKCFHFqJATAG
IxHrq1PDOiSwXd2GmVVYyEmhZnbcp8CxaEMQoevxAta0ssMK3w6UsDtvUvYvF22m
qQKBiD5GwESzsFPy3Ga0MvZpn3D6EJQLgsnrtUPZx+z2Ep2x0xc5orneB5fGyF1P
WtP+fG5Q6Dpdz3LRfm+KwBCWFKQjg7uTxcjerhBWEYPmEMKYwTJF5PBG9/ddvHLQ
EQeNC8fHGg4UXU8mhHnSBt3EA10qQJfRDs15M38eG2cYwB1PZpDHScDnDA0=
-----END RSA PRIVATE KEY-----`
	rfcKeyPSSPublic = `-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAr4tmm3r20Wd/PbqvP1s2
+QEtvpuRaV8Yq40gjUR8y2Rjxa6dpG2GXHbPfvMs8ct+Lh1GH45x28Rw3Ry53mm+
oAXjyQ86OnDkZ5N8lYbggD4O3w6M6pAvLkhk95AndTrifbIFPNU8PPMO7OyrFAHq
gDsznjPFmTOtCEcN2Z1FpWgchwuYLPL+Wokqltd11nqqzi+bJ9cvSKADYdUAAN5W
Utzdpiy6LbTgSxP7ociU4Tn0g5I6aDZJ7A8Lzo0KSyZYoA485mqcO0GVAdVw9lq4
aOT9v6d+nb4bnNkQVklLQ3fVAvJm+xdDOp9LCNCN48V2pnDOkFV6+U9nV5oyc6XI
2wIDAQAB
-----END PUBLIC KEY-----`
	rfcKeyPSSPrivate = `-----BEGIN PRIVATE KEY-----
MIIEvgIBADALBgkqhkiG9w0BAQoEggSqMIIEpgIBAAKCAQEAr4tmm3r20Wd/Pbqv
P1s2+QEtvpuRaV8Yq40gjUR8y2Rjxa6dpG2GXHbPfvMs8ct+Lh1GH45x28Rw3Ry5
3mm+oAXjyQ86OnDkZ5N8lYbggD4O3w6M6pAvLkhk95AndTrifbIFPNU8PPMO7Oyr
FAHqgDsznjPFmTOtCEcN2Z1FpWgchwuYLPL+Wokqltd11nqqzi+bJ9cvSKADYdUA
AN5WUtzdpiy6LbTgSxP7ociU4Tn0g5I6aDZJ7A8Lzo0KSyZYoA485mqcO0GVAdVw
9lq4aOT9v6d+nb4bnNkQVklLQ3fVAvJm+xdDOp9LCNCN48V2pnDOkFV6+U9nV5oy
c6XI2wIDAQABAoIBAQCUB8ip+kJiiZVKF8AqfB/aUP0jTAqOQewK1kKJ/iQCXBCq
pbo360gvdt05H5VZ/RDVkEgO2k73VSsbulqezKs8RFs2tEmU+JgTI9MeQJPWcP6X
aKy6LIYs0E2cWgp8GADgoBs8llBq0UhX0KffglIeek3n7Z6Gt4YFge2TAcW2WbN4
XfK7lupFyo6HHyWRiYHMMARQXLJeOSdTn5aMBP0PO4bQyk5ORxTUSeOciPJUFktQ
HkvGbym7KryEfwH8Tks0L7WhzyP60PL3xS9FNOJi9m+zztwYIXGDQuKM2GDsITeD
2mI2oHoPMyAD0wdI7BwSVW18p1h+jgfc4dlexKYRAoGBAOVfuiEiOchGghV5vn5N
RDNscAFnpHj1QgMr6/UG05RTgmcLfVsI1I4bSkbrIuVKviGGf7atlkROALOG/xRx
DLadgBEeNyHL5lz6ihQaFJLVQ0u3U4SB67J0YtVO3R6lXcIjBDHuY8SjYJ7Ci6Z6
vuDcoaEujnlrtUhaMxvSfcUJAoGBAMPsCHXte1uWNAqYad2WdLjPDlKtQJK1diCm
rqmB2g8QE99hDOHItjDBEdpyFBKOIP+NpVtM2KLhRajjcL9Ph8jrID6XUqikQuVi
4J9FV2m42jXMuioTT13idAILanYg8D3idvy/3isDVkON0X3UAVKrgMEne0hJpkPL
FYqgetvDAoGBAKLQ6JZMbSe0pPIJkSamQhsehgL5Rs51iX4m1z7+sYFAJfhvN3Q/
OGIHDRp6HjMUcxHpHw7U+S1TETxePwKLnLKj6hw8jnX2/nZRgWHzgVcY+sPsReRx
NJVf+Cfh6yOtznfX00p+JWOXdSY8glSSHJwRAMog+hFGW1AYdt7w80XBAoGBAImR
NUugqapgaEA8TrFxkJmngXYaAqpA0iYRA7kv3S4QavPBUGtFJHBNULzitydkNtVZ
3w6hgce0h9YThTo/nKc+OZDZbgfN9s7cQ75x0PQCAO4fx2P91Q+mDzDUVTeG30mE
t2m3S0dGe47JiJxifV9P3wNBNrZGSIF3mrORBVNDAoGBAI0QKn2Iv7Sgo4T/XjND
dl2kZTXqGAk8dOhpUiw/HdM3OGWbhHj2NdCzBliOmPyQtAr770GITWvbAI+IRYyF
S7Fnk6ZVVVHsxjtaHy1uJGFlaZzKR4AGNaUTOJMs6NadzCmGPAxNQQOCqoUjn4XR
rOjr9w349JooGXhOxbu8nOxX
-----END PRIVATE KEY-----`
	rfcKeyEd25519Public = `-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAJrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs=
-----END PUBLIC KEY-----`
	rfcKeyEd25519Private = `-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF
-----END PRIVATE KEY-----`

	rfcBody          = `{"hello": "world"}`
	rfcContentDigest = "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:"
	rfcCreated       = 1618884473
)

// rfcRequest is the B.2 test-request as a server receives it.
func rfcRequest() *http.Request {
	r := httptest.NewRequest(http.MethodPost, "https://example.com/foo?param=Value&Pet=dog", strings.NewReader(rfcBody))
	r.Host = "example.com"
	r.Header.Set("Date", "Tue, 20 Apr 2021 02:07:55 GMT")
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Content-Digest", rfcContentDigest)
	r.Header.Set("Content-Length", "18")
	return r
}

// rfcVectors are the B.2 request signatures: the Signature-Input member,
// the signature base the RFC prints, and the signature.
var rfcVectors = []struct {
	section, label, keyID, input, base, sig string
}{
	{
		section: "B.2.1 minimal, rsa-pss-sha512", label: "sig-b21", keyID: "test-key-rsa-pss",
		input: `();created=1618884473;keyid="test-key-rsa-pss";nonce="b3k2pp5k7z-50gnwp.yemd"`,
		base:  `"@signature-params": ();created=1618884473;keyid="test-key-rsa-pss";nonce="b3k2pp5k7z-50gnwp.yemd"`,
		sig: "d2pmTvmbncD3xQm8E9ZV2828BjQWGgiwAaw5bAkgibUopemLJcWDy/lkbbHAve4cR" +
			"Atx31Iq786U7it++wgGxbtRxf8Udx7zFZsckzXaJMkA7ChG52eSkFxykJeNqsrWH5S+oxNFlD4dzVuwe8DhTSja8xxbR/Z2cOGdCbzR72rgFWhzx2VjBqJzsPLMIQKhO4DGezXehhWwE56YCE+O6c0mKZsfxVrogUvA4HELjVKWmAvtl6UnCh8jYzuVG5WSb/QEVPnP5TmcAnLH1g+s++v6d4s8m0gCw1fV5/SITLq9mhho8K3+7EPYTU8IU1bLhdxO5Nyt8C8ssinQ98Xw9Q==",
	},
	{
		section: "B.2.2 selective, rsa-pss-sha512", label: "sig-b22", keyID: "test-key-rsa-pss",
		input: `("@authority" "content-digest" "@query-param";name="Pet");created=1618884473;keyid="test-key-rsa-pss";tag="header-example"`,
		base: `"@authority": example.com
"content-digest": ` + rfcContentDigest + `
"@query-param";name="Pet": dog
"@signature-params": ("@authority" "content-digest" "@query-param";name="Pet");created=1618884473;keyid="test-key-rsa-pss";tag="header-example"`,
		sig: "LjbtqUbfmvjj5C5kr1Ugj4PmLYvx9wVjZvD9GsTT4F7GrcQEdJzgI9qHxICagShLRiLMlAJjtq6N4CDfKtjvuJyE5qH7KT8UCMkSowOB4+ECxCmT8rtAmj/0PIXxi0A0nxKyB09RNrCQibbUjsLS/2YyFYXEu4TRJQzRw1rLEuEfY17SARYhpTlaqwZVtR8NV7+4UKkjqpcAoFqWFQh62s7Cl+H2fjBSpqfZUJcsIk4N6wiKYd4je2U/lankenQ99PZfB4jY3I5rSV2DSBVkSFsURIjYErOs0tFTQosMTAoxk//0RoKUqiYY8Bh0aaUEb0rQl3/XaVe4bXTugEjHSw==",
	},
	{
		section: "B.2.3 full coverage, rsa-pss-sha512", label: "sig-b23", keyID: "test-key-rsa-pss",
		input: `("date" "@method" "@path" "@query" "@authority" "content-type" "content-digest" "content-length");created=1618884473;keyid="test-key-rsa-pss"`,
		base: `"date": Tue, 20 Apr 2021 02:07:55 GMT
"@method": POST
"@path": /foo
"@query": ?param=Value&Pet=dog
"@authority": example.com
"content-type": application/json
"content-digest": ` + rfcContentDigest + `
"content-length": 18
"@signature-params": ("date" "@method" "@path" "@query" "@authority" "content-type" "content-digest" "content-length");created=1618884473;keyid="test-key-rsa-pss"`,
		sig: "bbN8oArOxYoyylQQUU6QYwrTuaxLwjAC9fbY2F6SVWvh0yBiMIRGOnMYwZ/5MR6fb0Kh1rIRASVxFkeGt683+qRpRRU5p2voTp768ZrCUb38K0fUxN0O0iC59DzYx8DFll5GmydPxSmme9v6ULbMFkl+V5B1TP/yPViV7KsLNmvKiLJH1pFkh/aYA2HXXZzNBXmIkoQoLd7YfW91kE9o/CCoC1xMy7JA1ipwvKvfrs65ldmlu9bpG6A9BmzhuzF8Eim5f8ui9eH8LZH896+QIF61ka39VBrohr9iyMUJpvRX2Zbhl5ZJzSRxpJyoEZAFL2FUo5fTIztsDZKEgM4cUA==",
	},
	{
		// B.2.5 is signed with HMAC, which courier never verifies; its base
		// is checked all the same.
		section: "B.2.5 base only (hmac-sha256)", label: "sig-b25", keyID: "test-shared-secret",
		input: `("date" "@authority" "content-type");created=1618884473;keyid="test-shared-secret"`,
		base: `"date": Tue, 20 Apr 2021 02:07:55 GMT
"@authority": example.com
"content-type": application/json
"@signature-params": ("date" "@authority" "content-type");created=1618884473;keyid="test-shared-secret"`,
	},
	{
		section: "B.2.6 ed25519", label: "sig-b26", keyID: "test-key-ed25519",
		input: `("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"`,
		base: `"date": Tue, 20 Apr 2021 02:07:55 GMT
"@method": POST
"@path": /foo
"@authority": example.com
"content-type": application/json
"content-length": 18
"@signature-params": ("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"`,
		sig: "wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==",
	},
}

// rfcKeys returns the Appendix B.1 keys by key id: the public key, the
// private key and the algorithm.
func rfcKeys(t testing.TB) map[string]struct {
	pub  crypto.PublicKey
	priv crypto.Signer
	alg  string
} {
	t.Helper()
	rsaPub, err := ParsePublicKeyPEM(rfcKeyRSAPublic)
	if err != nil {
		t.Fatal(err)
	}
	rsaPriv, err := ParsePrivateKeyPEM(rfcKeyRSAPrivate)
	if err != nil {
		t.Fatal(err)
	}
	pssPub, err := ParsePublicKeyPEM(rfcKeyPSSPublic)
	if err != nil {
		t.Fatal(err)
	}
	// The PSS private key is PKCS#8 with the RSASSA-PSS algorithm
	// identifier, which x509 does not read: take its PKCS#1 key.
	var pkcs8 struct {
		Version int
		Algo    asn1.RawValue
		Key     []byte
	}
	block, _ := pem.Decode([]byte(rfcKeyPSSPrivate))
	if _, err := asn1.Unmarshal(block.Bytes, &pkcs8); err != nil {
		t.Fatal(err)
	}
	pssPriv, err := x509.ParsePKCS1PrivateKey(pkcs8.Key)
	if err != nil {
		t.Fatal(err)
	}
	edPub, err := ParsePublicKeyPEM(rfcKeyEd25519Public)
	if err != nil {
		t.Fatal(err)
	}
	block, _ = pem.Decode([]byte(rfcKeyEd25519Private))
	edPriv, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]struct {
		pub  crypto.PublicKey
		priv crypto.Signer
		alg  string
	}{
		"test-key-rsa":     {rsaPub, rsaPriv, AlgRSAv15SHA256},
		"test-key-rsa-pss": {pssPub, pssPriv, AlgRSAPSSSHA512},
		"test-key-ed25519": {edPub, edPriv.(ed25519.PrivateKey), AlgEd25519},
	}
}

// TestRFC9421Vectors checks every Appendix B.2 request vector: the parsed
// Signature-Input gives the RFC's signature base byte for byte, the RFC's
// signature verifies over it, a signature courier makes over it verifies
// (for ed25519, being deterministic, equals the RFC's), and a changed base
// does not verify.
func TestRFC9421Vectors(t *testing.T) {
	t.Parallel()
	keys := rfcKeys(t)
	for _, v := range rfcVectors {
		t.Run(v.section, func(t *testing.T) {
			t.Parallel()
			r := rfcRequest()
			r.Header.Set("Signature-Input", v.label+"="+v.input)
			r.Header.Set("Signature", v.label+"=:"+base64.StdEncoding.EncodeToString([]byte("placeholder"))+":")
			p, err := parseMessageSignature(r)
			if err != nil {
				t.Fatal(err)
			}
			if p.KeyID != v.keyID || p.Created != rfcCreated || p.msg.label != v.label {
				t.Fatalf("parsed keyid %q created %d label %q", p.KeyID, p.Created, p.msg.label)
			}
			base, err := messageSignatureBase(r, "https", p.msg.components, p.msg.params)
			if err != nil {
				t.Fatal(err)
			}
			if base != v.base {
				t.Fatalf("signature base:\n%s\nwant:\n%s", base, v.base)
			}
			if v.sig == "" {
				return
			}
			k := keys[v.keyID]
			sig, err := base64.StdEncoding.DecodeString(v.sig)
			if err != nil {
				t.Fatal(err)
			}
			if err := verifyMessageBytes(k.alg, k.pub, []byte(base), sig); err != nil {
				t.Fatalf("the RFC's signature: %v", err)
			}
			mine, err := signMessageBytes(k.alg, k.priv, []byte(base))
			if err != nil {
				t.Fatal(err)
			}
			if err := verifyMessageBytes(k.alg, k.pub, []byte(base), mine); err != nil {
				t.Fatalf("courier's signature: %v", err)
			}
			if k.alg == AlgEd25519 && !bytes.Equal(mine, sig) {
				t.Fatalf("ed25519 signature %s, want the RFC's %s", base64.StdEncoding.EncodeToString(mine), v.sig)
			}
			if err := verifyMessageBytes(k.alg, k.pub, []byte(base+" "), sig); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("changed base: got %v, want ErrBadSignature", err)
			}
		})
	}
}

// TestRFC9421VectorThroughVerify runs B.2.3, the one vector covering what
// courier requires of an inbound POST (@method, @authority and @path,
// content-digest, created), through RequestSignature and VerifySignature
// with the clock at its created time, then at two hours later.
func TestRFC9421VectorThroughVerify(t *testing.T) {
	t.Parallel()
	v := rfcVectors[2]
	keys := rfcKeys(t)
	r := rfcRequest()
	r.Header.Set("Signature-Input", v.label+"="+v.input)
	r.Header.Set("Signature", v.label+"=:"+v.sig+":")
	p, err := RequestSignature(r)
	if err != nil {
		t.Fatal(err)
	}
	if !p.IsMessageSignature() || p.KeyID != "test-key-rsa-pss" {
		t.Fatalf("parsed %+v", p)
	}
	at := func(d time.Duration) VerifyOptions {
		return VerifyOptions{Now: func() time.Time { return time.Unix(rfcCreated, 0).Add(d) }}
	}
	if err := VerifySignature(r, p, []byte(rfcBody), keys["test-key-rsa-pss"].pub, at(0)); err != nil {
		t.Fatalf("B.2.3 at its created time: %v", err)
	}
	if err := VerifySignature(r, p, []byte(rfcBody), keys["test-key-rsa-pss"].pub, at(2*time.Hour)); !errors.Is(err, ErrDateOutOfWindow) {
		t.Fatalf("two hours later: got %v, want ErrDateOutOfWindow", err)
	}
	if err := VerifySignature(r, p, []byte(`{"hello": "World"}`), keys["test-key-rsa-pss"].pub, at(0)); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("another body: got %v, want ErrDigestMismatch", err)
	}
	// The key decides the algorithm: an Ed25519 key, or alg naming another
	// family than the key's, does not verify.
	if err := VerifySignature(r, p, []byte(rfcBody), keys["test-key-ed25519"].pub, at(0)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("Ed25519 key: got %v, want ErrBadSignature", err)
	}
	r.Header.Set("Signature-Input", v.label+"="+v.input+`;alg="hmac-sha256"`)
	p, err = RequestSignature(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifySignature(r, p, []byte(rfcBody), keys["test-key-rsa-pss"].pub, at(0)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("alg=hmac-sha256 with an RSA key: got %v, want ErrBadSignature", err)
	}
	if err := VerifySignature(r, p, []byte(rfcBody), []byte("secret"), at(0)); !errors.Is(err, ErrUnsupportedKey) {
		t.Fatalf("a byte key: got %v, want ErrUnsupportedKey", err)
	}
}

// TestRFC9530ContentDigest checks the B.2 request's sha-512 Content-Digest
// against its body, and ContentDigest's sha-256 form.
func TestRFC9530ContentDigest(t *testing.T) {
	t.Parallel()
	if err := checkContentDigest([]string{rfcContentDigest}, []byte(rfcBody)); err != nil {
		t.Fatal(err)
	}
	if err := checkContentDigest([]string{ContentDigest([]byte(rfcBody))}, []byte(rfcBody)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{
		{rfcContentDigest + ", " + ContentDigest([]byte("other"))},
		{"md5=:AAAA:"},
		{"sha-256=AAAA"},
		nil,
	} {
		if err := checkContentDigest(bad, []byte(rfcBody)); !errors.Is(err, ErrDigestMismatch) {
			t.Errorf("Content-Digest %q: got %v, want ErrDigestMismatch", bad, err)
		}
	}
}

// serverRequest turns a client request signed by SignMessage into the
// request a server receives.
func serverRequest(t *testing.T, req *http.Request, body []byte) *http.Request {
	t.Helper()
	r := httptest.NewRequest(req.Method, req.URL.String(), bytes.NewReader(body))
	if body == nil {
		r = httptest.NewRequest(req.Method, req.URL.String(), nil)
	}
	r.Header = req.Header.Clone()
	return r
}

// TestSignMessageRoundTrip signs with each algorithm courier signs
// (rsa-v1_5-sha256 with the B.1.1 key, ed25519 with the B.1.4 key) and
// verifies through RequestSignature and VerifySignature, for a POST and a
// GET, with a percent-encoded path; then checks what must fail.
func TestSignMessageRoundTrip(t *testing.T) {
	t.Parallel()
	keys := rfcKeys(t)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	opts := VerifyOptions{Now: func() time.Time { return now.Add(30 * time.Second) }}
	body := []byte(`{"type":"Create"}`)
	for _, id := range []string{"test-key-rsa", "test-key-ed25519"} {
		k := keys[id]
		for _, b := range [][]byte{body, nil} {
			method := http.MethodPost
			if b == nil {
				method = http.MethodGet
			}
			req, err := http.NewRequest(method, "https://remote.example/users/b%C3%B6b/inbox?x=1", nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := SignMessage(req, b, id, k.priv, now); err != nil {
				t.Fatal(err)
			}
			if got := req.Header.Get("Signature-Input"); !strings.Contains(got, `alg="`+k.alg+`"`) || !strings.Contains(got, `"@target-uri"`) {
				t.Fatalf("Signature-Input %q", got)
			}
			r := serverRequest(t, req, b)
			p, err := RequestSignature(r)
			if err != nil {
				t.Fatal(err)
			}
			if p.KeyID != id || p.Algorithm != k.alg {
				t.Fatalf("keyid %q alg %q", p.KeyID, p.Algorithm)
			}
			if err := VerifySignature(r, p, b, k.pub, opts); err != nil {
				t.Fatalf("%s %s: %v", id, method, err)
			}
			// Behind a TLS-terminating proxy the request arrives over http:
			// @target-uri still verifies with the https scheme it was signed for.
			if r.TLS == nil {
				t.Fatal("httptest gives https URLs a TLS state")
			}
			plain := serverRequest(t, req, b)
			plain.TLS = nil
			if err := VerifySignature(plain, p, b, k.pub, opts); err != nil {
				t.Fatalf("%s %s without TLS: %v", id, method, err)
			}
			moved := serverRequest(t, req, b)
			moved.URL.Path, moved.RequestURI = "/users/alice/inbox", "/users/alice/inbox?x=1"
			if err := VerifySignature(moved, p, b, k.pub, opts); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("another path: got %v, want ErrBadSignature", err)
			}
		}
	}
	// A POST whose signature leaves content-digest out, or has no created.
	for name, input := range map[string]string{
		"no content-digest": `sig1=("@method" "@target-uri");created=%d;keyid="k"`,
		"no @method":        `sig1=("@target-uri" "content-digest");created=%d;keyid="k"`,
		"no target":         `sig1=("@method" "@authority" "content-digest");created=%d;keyid="k"`,
	} {
		r := rfcRequest()
		r.Header.Set("Signature-Input", strings.Replace(input, "%d", "1618884473", 1))
		r.Header.Set("Signature", "sig1=:AAAA:")
		p, err := RequestSignature(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := VerifySignature(r, p, []byte(rfcBody), keys["test-key-rsa"].pub, VerifyOptions{Now: func() time.Time { return time.Unix(rfcCreated, 0) }}); !errors.Is(err, ErrMissingSignedHeader) {
			t.Errorf("%s: got %v, want ErrMissingSignedHeader", name, err)
		}
	}
	r := rfcRequest()
	r.Header.Set("Signature-Input", `sig1=("@method" "@target-uri" "content-digest");keyid="k"`)
	r.Header.Set("Signature", "sig1=:AAAA:")
	p, err := RequestSignature(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifySignature(r, p, []byte(rfcBody), keys["test-key-rsa"].pub, VerifyOptions{}); !errors.Is(err, ErrDateOutOfWindow) {
		t.Errorf("no created: got %v, want ErrDateOutOfWindow", err)
	}
}

// TestParseMessageSignatureRefuses checks the malformed Signature-Input
// and Signature values courier refuses with ErrMalformedSignature.
func TestParseMessageSignatureRefuses(t *testing.T) {
	t.Parallel()
	for name, hdr := range map[string][2]string{
		"no Signature":       {`sig1=("@method");created=1;keyid="k"`, ""},
		"no keyid":           {`sig1=("@method");created=1`, `sig1=:AAAA:`},
		"label mismatch":     {`sig1=("@method");created=1;keyid="k"`, `sig2=:AAAA:`},
		"unterminated list":  {`sig1=("@method";created=1;keyid="k"`, `sig1=:AAAA:`},
		"not base64":         {`sig1=("@method");created=1;keyid="k"`, `sig1=:A*A:`},
		"token component":    {`sig1=(method);created=1;keyid="k"`, `sig1=:AAAA:`},
		"negative created":   {`sig1=("@method");created=-1;keyid="k"`, `sig1=:AAAA:`},
		"string created":     {`sig1=("@method");created="1";keyid="k"`, `sig1=:AAAA:`},
		"trailing comma":     {`sig1=("@method");created=1;keyid="k",`, `sig1=:AAAA:`},
		"oversized":          {`sig1=("@method");created=1;keyid="` + strings.Repeat("k", maxSignatureInput) + `"`, `sig1=:AAAA:`},
		"unterminated value": {`sig1=("@method");created=1;keyid="k`, `sig1=:AAAA:`},
	} {
		r := rfcRequest()
		r.Header.Set("Signature-Input", hdr[0])
		if hdr[1] != "" {
			r.Header.Set("Signature", hdr[1])
		}
		if _, err := RequestSignature(r); !errors.Is(err, ErrMalformedSignature) {
			t.Errorf("%s: got %v, want ErrMalformedSignature", name, err)
		}
	}
	// A draft-cavage signature beside a stray Signature-Input is verified
	// as draft-cavage.
	_, pub := specKeys(t)
	both := specRequest(specSigAll)
	both.Header.Set("Signature-Input", `sig1=("@method");keyid="x"`)
	if err := Verify(both, []byte(specBody), pub, VerifyOptions{Now: func() time.Time { return specTime }}); err != nil {
		t.Fatalf("draft-cavage beside Signature-Input: %v", err)
	}
	// An unsupported component parameter is ErrRFC9421.
	r := rfcRequest()
	r.Header.Set("Signature-Input", `sig1=("@method" "@target-uri" "content-digest";sf);created=1618884473;keyid="k"`)
	r.Header.Set("Signature", "sig1=:AAAA:")
	p, err := RequestSignature(r)
	if err != nil {
		t.Fatal(err)
	}
	rsaPub, _ := ParsePublicKeyPEM(rfcKeyRSAPublic)
	if err := VerifySignature(r, p, []byte(rfcBody), rsaPub.(*rsa.PublicKey), VerifyOptions{Now: func() time.Time { return time.Unix(rfcCreated, 0) }}); !errors.Is(err, ErrRFC9421) {
		t.Fatalf("content-digest;sf: got %v, want ErrRFC9421", err)
	}
}
