package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The specification's published test vector: secret, message id,
// timestamp and body, and the signature they make.
const (
	vecSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vecID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vecTS     = "1614265330"
	vecBody   = `{"test": 2432232314}`
	vecSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func vecReceiver(t *testing.T, out *bytes.Buffer, secrets ...string) *Receiver {
	r, err := NewReceiver(secrets, out)
	if err != nil {
		t.Fatal(err)
	}
	r.now = func() time.Time { return time.Unix(1614265330, 0).Add(time.Minute) }
	return r
}

func TestVerifyTestVector(t *testing.T) {
	r := vecReceiver(t, &bytes.Buffer{}, vecSecret)
	for _, tc := range []struct {
		name, id, ts, sigs, body string
		ok                       bool
	}{
		{"the vector", vecID, vecTS, vecSig, vecBody, true},
		{"beside another secret's signature", vecID, vecTS, "v1,AAAA " + vecSig, vecBody, true},
		{"another body", vecID, vecTS, vecSig, `{"test": 2432232315}`, false},
		{"another id", "msg_x", vecTS, vecSig, vecBody, false},
		{"another timestamp", vecID, "1614265331", vecSig, vecBody, false},
		{"another version", vecID, vecTS, "v2," + vecSig[3:], vecBody, false},
		{"too old", vecID, "1614264000", vecSig, vecBody, false},
		{"no signature", vecID, vecTS, "", vecBody, false},
	} {
		if err := r.Verify(tc.id, tc.ts, tc.sigs, []byte(tc.body)); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	// During a rotation the receiver may know the old secret only.
	r2 := vecReceiver(t, &bytes.Buffer{}, "whsec_aGVsbG8=", vecSecret)
	if err := r2.Verify(vecID, vecTS, vecSig, []byte(vecBody)); err != nil {
		t.Fatalf("with two secrets: %v", err)
	}
}

func TestDuplicatesDropped(t *testing.T) {
	var out bytes.Buffer
	r := vecReceiver(t, &out, vecSecret)
	body := `{"type":"webhook.test","timestamp":"2021-02-25T15:02:10Z","data":{}}`
	send := func(sig string) int {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		req.Header.Set("webhook-id", "msg_1")
		req.Header.Set("webhook-timestamp", vecTS)
		req.Header.Set("webhook-signature", sig)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w.Code
	}
	if code := send("v1,AAAA"); code != http.StatusUnauthorized {
		t.Fatalf("a bad signature: %d", code)
	}
	sig := sign(t, vecSecret, "msg_1", vecTS, body)
	for range 3 {
		if code := send(sig); code != http.StatusNoContent {
			t.Fatalf("a good message: %d", code)
		}
	}
	if n := strings.Count(out.String(), "\n"); n != 1 || !strings.Contains(out.String(), `"type":"webhook.test"`) {
		t.Fatalf("printed %d events, want 1:\n%s", n, out.String())
	}
}

// sign signs as the specification says, checked against its vector.
func sign(t *testing.T, secret, id, ts, body string) string {
	r := vecReceiver(t, &bytes.Buffer{}, secret)
	if got := hmacSig(r.keys[0], vecID, vecTS, vecBody); got != vecSig && secret == vecSecret {
		t.Fatalf("the test's signer makes %s for the vector, want %s", got, vecSig)
	}
	return hmacSig(r.keys[0], id, ts, body)
}

// hmacSig returns "v1,<base64 HMAC-SHA256 of id.ts.body>" with key.
func hmacSig(key []byte, id, ts, body string) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s.%s.%s", id, ts, body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}
