package activitypub

import (
	"bytes"
	"crypto"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-fed/httpsig"
)

// The tests below hold Verify and ParseSignatureHeader to the behaviour of
// their straightforward first versions, kept here as references: a full
// clone of the request and its headers handed to httpsig, and a parser
// that copies every quoted value byte by byte and keeps a map of names.

// parseSignatureHeaderRef is the reference parser.
func parseSignatureHeaderRef(h string) (*SignatureParams, error) {
	if len(h) > maxSignatureHeader {
		return nil, ErrMalformedSignature
	}
	s := strings.TrimSpace(h)
	if len(s) > 10 && strings.EqualFold(s[:10], "signature ") {
		s = s[10:]
	}
	p := &SignatureParams{}
	seen := map[string]bool{}
	for i := 0; i < len(s); {
		for i < len(s) && (s[i] == ',' || s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i >= len(s) {
			break
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq <= 0 {
			return nil, ErrMalformedSignature
		}
		name := strings.TrimSpace(s[i : i+eq])
		i += eq + 1
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		var val string
		if i < len(s) && s[i] == '"' {
			i++
			var b strings.Builder
			closed := false
			for i < len(s) {
				c := s[i]
				if c == '\\' && i+1 < len(s) {
					b.WriteByte(s[i+1])
					i += 2
					continue
				}
				i++
				if c == '"' {
					closed = true
					break
				}
				b.WriteByte(c)
			}
			if !closed {
				return nil, ErrMalformedSignature
			}
			val = b.String()
		} else {
			end := strings.IndexByte(s[i:], ',')
			if end < 0 {
				end = len(s) - i
			}
			val = strings.TrimSpace(s[i : i+end])
			i += end
		}
		key := strings.ToLower(name)
		if seen[key] {
			return nil, ErrMalformedSignature
		}
		seen[key] = true
		switch key {
		case "keyid":
			p.KeyID = val
		case "algorithm":
			p.Algorithm = val
		case "headers":
			if strings.IndexFunc(val, func(r rune) bool { return r >= 0x80 }) >= 0 {
				return nil, ErrMalformedSignature
			}
			p.Headers = strings.Fields(strings.ToLower(val))
		case "signature":
			p.Signature = val
		case "created", "expires":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < 0 {
				return nil, ErrMalformedSignature
			}
			if key == "created" {
				p.Created = n
			} else {
				p.Expires = n
			}
		}
	}
	if p.KeyID == "" || p.Signature == "" {
		return nil, ErrMalformedSignature
	}
	if !seen["headers"] {
		p.Headers = []string{"date"}
	}
	if len(p.Headers) == 0 {
		return nil, ErrMalformedSignature
	}
	return p, nil
}

// verifyRef is the reference Verify, on top of the package's parser and
// checks (checkSignature's, made before the signature itself), handing
// httpsig a clone of the request and all its headers. It fails at the first
// check that fails, as Verify does; the tests compare the sentinels matched.
func verifyRef(r *http.Request, body []byte, pub crypto.PublicKey, opts VerifyOptions) error {
	p, err := RequestSignature(r)
	if err != nil {
		return err
	}
	algo, err := checkSignature(r, p, body, pub, opts)
	if err != nil {
		return err
	}
	path, query := rawTarget(r)
	hdr := r.Header.Clone()
	if hdr == nil {
		hdr = http.Header{}
	}
	hdr.Del("Authorization")
	hdr.Set("Signature", p.String())
	if r.Host != "" {
		hdr["Host"] = []string{r.Host}
	}
	for _, h := range p.Headers {
		if strings.HasPrefix(h, "(") {
			continue
		}
		if _, ok := hdr[textproto.CanonicalMIMEHeaderKey(h)]; !ok {
			return ErrBadSignature
		}
	}
	cp := r.WithContext(r.Context())
	u := *r.URL
	u.Path, u.RawPath, u.RawQuery = path, "", query
	cp.URL = &u
	cp.Header = hdr
	v, err := httpsig.NewVerifier(cp)
	if err != nil {
		return ErrMalformedSignature
	}
	if err := v.Verify(pub, algo); err != nil {
		return ErrBadSignature
	}
	return nil
}

// sentinel returns the verification sentinel err matches, or nil.
func sentinel(err error) error {
	for _, s := range []error{ErrNoSignature, ErrRFC9421, ErrMalformedSignature, ErrMissingSignedHeader,
		ErrDigestMismatch, ErrDateOutOfWindow, ErrUnsupportedKey, ErrBadSignature} {
		if errors.Is(err, s) {
			return s
		}
	}
	if err != nil {
		return errors.New("no sentinel: " + err.Error())
	}
	return nil
}

// signatureInputs are Signature header values that exercise the parser.
var signatureInputs = []string{
	specSigDefault, specSigBasic, specSigAll,
	strings.ReplaceAll(specSigAll, `",`, `", `),
	"Signature " + specSigAll,
	"signature " + specSigAll,
	`keyId="a",signature="b"`,
	`KEYID="a",Signature="b",Headers="(Request-Target) HOST Date"`,
	`keyId=a, signature=b`,
	`keyId = "a" , signature = "b" ,`,
	`keyId="a\"b",signature="c"`,
	`keyId="a\\",signature="c"`,
	`keyId="a\`,
	`keyId="a",signature="b`,
	`keyId="a",signature="b",keyid="c"`,
	`keyId="a",signature="b",foo="x",FOO="y"`,
	`keyId="a",signature="b",foo="x",bar="y"`,
	`keyId="a",signature="b",headers=""`,
	`keyId="a",signature="b",headers="  "`,
	`keyId="a",signature="b",created=12,expires=34`,
	`keyId="a",signature="b",created=-1`,
	`keyId="a",signature="b",created=x`,
	`keyId="a",signature="b",created="56"`,
	"\u212AeyId=\"a\",signature=\"b\"",
	"\u017Fignature=\"b\",keyId=\"a\"",
	`keyId="é",signature="b",algorithm="ÄÖ"`,
	`=`, `,,,`, `keyId="`, ``, `nonsense`, `keyId`,
	`keyId="a",signature="b",` + strings.Repeat("x", maxSignatureHeader),
	"keyId=\"a\",signature=\"b\",headers=\"date \xff\"",
	"keyId=\"a\",signature=\"b\",headers=\"date \u00e9\"",
	// Lower-cased, each invalid byte would become three: the canonical
	// form of an accepted header would no longer fit the bound.
	`keyId="a",signature="b",headers="` + strings.Repeat("\xff", maxSignatureHeader/2) + `"`,
}

func TestParseSignatureHeaderMatchesReference(t *testing.T) {
	t.Parallel()
	for _, h := range signatureInputs {
		checkParseAgainstRef(t, h)
	}
}

func FuzzParseSignatureHeaderMatchesReference(f *testing.F) {
	for _, h := range signatureInputs {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, h string) { checkParseAgainstRef(t, h) })
}

func checkParseAgainstRef(t *testing.T, h string) {
	t.Helper()
	got, err := ParseSignatureHeader(h)
	want, wantErr := parseSignatureHeaderRef(h)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("ParseSignatureHeader(%q) error %v, reference %v", h, err, wantErr)
	}
	if err != nil {
		if !errors.Is(err, ErrMalformedSignature) {
			t.Fatalf("ParseSignatureHeader(%q) error %v does not match ErrMalformedSignature", h, err)
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseSignatureHeader(%q) = %+v, reference %+v", h, got, want)
	}
}

// TestVerifyMatchesReference runs Verify and the reference on the Appendix
// C request changed in many ways, including headers httpsig must not see
// and headers it must see the values of.
func TestVerifyMatchesReference(t *testing.T) {
	t.Parallel()
	_, pub := specKeys(t)
	opts := VerifyOptions{Now: func() time.Time { return specTime }}
	mutations := map[string]func(r *http.Request){
		"as signed":              func(*http.Request) {},
		"extra unsigned header":  func(r *http.Request) { r.Header.Set("X-Extra", "1") },
		"changed signed header":  func(r *http.Request) { r.Header.Set("Content-Length", "19") },
		"repeated signed header": func(r *http.Request) { r.Header.Add("Content-Type", "text/plain") },
		"absent signed header":   func(r *http.Request) { r.Header.Del("Content-Type") },
		"empty signed header":    func(r *http.Request) { r.Header.Set("Content-Type", "") },
		"padded signed header":   func(r *http.Request) { r.Header.Set("Content-Type", "  application/json ") },
		"other host":             func(r *http.Request) { r.Host = "example.org" },
		"host only in header":    func(r *http.Request) { r.Header.Set("Host", r.Host); r.Host = "" },
		"no host at all":         func(r *http.Request) { r.Host = "" },
		"host header and r.Host": func(r *http.Request) { r.Header.Set("Host", "example.org") },
		"percent-encoded path":   func(r *http.Request) { r.RequestURI = "/f%6Fo?param=value&pet=dog" },
		"absolute request URI":   func(r *http.Request) { r.RequestURI = specURL },
		"no request URI":         func(r *http.Request) { r.RequestURI = "" },
		"query changed":          func(r *http.Request) { r.RequestURI = "/foo?param=value&pet=cat" },
		"fragment in URI":        func(r *http.Request) { r.RequestURI = "/foo?param=value&pet=dog#x" },
		"empty Digest value":     func(r *http.Request) { r.Header.Set("Digest", "") },
		"second Digest":          func(r *http.Request) { r.Header.Add("Digest", "SHA-512=AAAA") },
		"lower-case Digest algo": func(r *http.Request) { r.Header.Set("Digest", strings.Replace(specDigest, "SHA", "sha", 1)) },
		"unparseable Date":       func(r *http.Request) { r.Header.Set("Date", "yesterday") },
		"method GET":             func(r *http.Request) { r.Method = http.MethodGet },
		"Authorization present":  func(r *http.Request) { r.Header.Set("Authorization", "Bearer x") },
		"signature in both":      func(r *http.Request) { r.Header.Set("Authorization", "Signature "+specSigAll) },
		"signature only in Auth": func(r *http.Request) {
			r.Header.Set("Authorization", "Signature "+specSigAll)
			r.Header.Del("Signature")
		},
		"Signature-Input present": func(r *http.Request) { r.Header.Set("Signature-Input", `sig1=("@method")`) },
		"authorization signed": func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer x")
			r.Header.Set("Signature", strings.Replace(specSigAll, `content-length"`, `content-length authorization"`, 1))
		},
		"signature signed": func(r *http.Request) {
			r.Header.Set("Signature", strings.Replace(specSigAll, `content-length"`, `content-length signature"`, 1))
		},
		"host not signed": func(r *http.Request) {
			r.Header.Set("Signature", strings.Replace(specSigAll, ` host`, ``, 1))
		},
		"created instead of date": func(r *http.Request) {
			r.Header.Set("Signature", strings.Replace(specSigAll, ` date`, ` (created)`, 1))
		},
		"spaces after commas": func(r *http.Request) {
			r.Header.Set("Signature", strings.ReplaceAll(specSigAll, `",`, `", `))
		},
		"(expires) signed without a value": func(r *http.Request) {
			r.Header.Set("Signature", strings.Replace(specSigAll, `content-length"`, `content-length (expires)"`, 1))
		},
		"unknown pseudo-header signed": func(r *http.Request) {
			r.Header.Set("Signature", strings.Replace(specSigAll, `content-length"`, `content-length (foo)"`, 1))
		},
		"pseudo-header without value before an absent header": func(r *http.Request) {
			r.Header.Set("Signature", strings.Replace(specSigAll, `content-length"`, `(created) content-length x-absent"`, 1))
		},
		"header signed twice": func(r *http.Request) {
			r.Header.Set("Signature", strings.Replace(specSigAll, `content-length"`, `content-length date"`, 1))
		},
		"signature not base64": func(r *http.Request) {
			r.Header.Set("Signature", strings.Replace(specSigAll, `signature="vSdrb`, `signature="!Sdrb`, 1))
		},
		"quote in keyId": func(r *http.Request) {
			r.Header.Set("Signature", strings.Replace(specSigAll, `keyId="Test"`, `keyId="Te\"st"`, 1))
		},
	}
	for name, mutate := range mutations {
		for _, body := range []string{specBody, "", `{"hello": "World"}`} {
			r1, r2 := specRequest(specSigAll), specRequest(specSigAll)
			mutate(r1)
			mutate(r2)
			got := sentinel(Verify(r1, []byte(body), pub, opts))
			want := sentinel(verifyRef(r2, []byte(body), pub, opts))
			if got != want {
				t.Errorf("%s, body %q: Verify gives %v, the reference %v", name, body, got, want)
			}
		}
	}
}

// TestVerifyLeavesRequestAlone checks that Verify does not change the
// request it checks.
func TestVerifyLeavesRequestAlone(t *testing.T) {
	t.Parallel()
	_, pub := specKeys(t)
	r := specRequest(strings.ReplaceAll(specSigAll, `",`, `", `))
	r.Header.Set("Authorization", "Bearer x")
	before, url, host, uri := r.Header.Clone(), *r.URL, r.Host, r.RequestURI
	if err := Verify(r, []byte(specBody), pub, VerifyOptions{Now: func() time.Time { return specTime }}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Header, before) || *r.URL != url || r.Host != host || r.RequestURI != uri {
		t.Fatalf("Verify changed the request: %v %v %q %q", r.Header, r.URL, r.Host, r.RequestURI)
	}
}

// TestVerifySignature checks the variant for parsed parameters: the same
// answers as Verify, and the signature it is given is the one checked.
func TestVerifySignature(t *testing.T) {
	t.Parallel()
	_, pub := specKeys(t)
	opts := VerifyOptions{Now: func() time.Time { return specTime }}
	r := specRequest(specSigAll)
	p, err := RequestSignature(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifySignature(r, p, []byte(specBody), pub, opts); err != nil {
		t.Fatalf("VerifySignature: %v", err)
	}
	if err := VerifySignature(r, p, []byte(`{"hello": "World"}`), pub, opts); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("changed body: got %v, want ErrDigestMismatch", err)
	}
	basic, err := ParseSignatureHeader(specSigBasic)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifySignature(r, basic, []byte(specBody), pub, opts); !errors.Is(err, ErrMissingSignedHeader) {
		t.Fatalf("parameters without digest: got %v, want ErrMissingSignedHeader", err)
	}
	forged := *p
	forged.Signature = strings.Replace(p.Signature, "vSdrb", "wSdrb", 1)
	if err := VerifySignature(r, &forged, []byte(specBody), pub, opts); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("other signature bytes: got %v, want ErrBadSignature", err)
	}
	if err := VerifySignature(r, nil, []byte(specBody), pub, opts); !errors.Is(err, ErrNoSignature) {
		t.Fatalf("nil parameters: got %v, want ErrNoSignature", err)
	}
}

// TestVerifyOverHTTPMatchesReference verifies requests signed by
// SignRequest as a server receives them, through a real listener.
func TestVerifyOverHTTPMatchesReference(t *testing.T) {
	t.Parallel()
	key := testKey()
	results := make(chan [2]error, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		results <- [2]error{
			sentinel(Verify(r, body, &key.PublicKey, VerifyOptions{})),
			sentinel(verifyRef(r, body, &key.PublicKey, VerifyOptions{})),
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	for _, path := range []string{"/inbox", "/users/a%2Fb/inbox", "/inbox?x=1&y=%20"} {
		body := []byte(`{"type":"Create"}`)
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, io.NopCloser(bytes.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ContentType)
		if err := SignRequest(req, body, "https://remote.example/users/a#main-key", key, time.Now()); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		select {
		case res := <-results:
			if res[0] != nil || res[1] != nil {
				t.Errorf("%s: Verify %v, reference %v; want both nil", path, res[0], res[1])
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no request reached the server", path)
		}
	}
}

// TestVerifyCreatedAhead checks the (created) parameter against the clock as
// the reference does: more than 10 s ahead is refused even within the window.
func TestVerifyCreatedAhead(t *testing.T) {
	t.Parallel()
	_, pub := specKeys(t)
	now := time.Now()
	opts := VerifyOptions{Now: func() time.Time { return now }}
	for _, ahead := range []time.Duration{0, 9 * time.Second, 11 * time.Second, 30 * time.Minute, 2 * time.Hour} {
		sig := fmt.Sprintf(`keyId="Test",algorithm="hs2019",created=%d,headers="(request-target) host (created) digest",signature="AAAA"`,
			now.Add(ahead).Unix())
		got := sentinel(Verify(specRequest(sig), []byte(specBody), pub, opts))
		want := sentinel(verifyRef(specRequest(sig), []byte(specBody), pub, opts))
		if got != want {
			t.Errorf("created %s ahead: Verify gives %v, the reference %v", ahead, got, want)
		}
	}
}

// TestVerifyRefusesSignatureLongerThanKey: a junk signature longer than the
// key's signatures is refused before it is decoded or checked.
func TestVerifyRefusesSignatureLongerThanKey(t *testing.T) {
	t.Parallel()
	_, pub := specKeys(t)
	opts := VerifyOptions{Now: func() time.Time { return specTime }}
	p, err := ParseSignatureHeader(specSigAll)
	if err != nil {
		t.Fatal(err)
	}
	exact := *p
	exact.Signature = base64.StdEncoding.EncodeToString(make([]byte, pub.Size()))
	err = VerifySignature(specRequest(specSigAll), &exact, []byte(specBody), pub, opts)
	if !errors.Is(err, ErrBadSignature) || strings.Contains(err.Error(), "characters") {
		t.Fatalf("zero signature of the key's length: got %v, want a failed check", err)
	}
	junk := *p
	junk.Signature = base64.StdEncoding.EncodeToString(make([]byte, 5900))
	err = VerifySignature(specRequest(specSigAll), &junk, []byte(specBody), pub, opts)
	if !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), "more than the 172 a 128-byte signature takes") {
		t.Fatalf("5,900-byte signature for a 1024-bit key: got %v, want the length refused", err)
	}
}
