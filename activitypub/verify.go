package activitypub

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-fed/httpsig"
)

// Verification errors. Each failure of Verify (and of RequestKeyID) matches
// exactly one of these with errors.Is, so an inbox can map it to a status and
// a metric reason.
var (
	// ErrNoSignature: the request carries no Signature header.
	ErrNoSignature = errors.New("activitypub: no signature")
	// ErrRFC9421: the request's RFC 9421 signature (Signature-Input) uses a
	// component or parameter courier does not verify.
	ErrRFC9421 = errors.New("activitypub: RFC 9421 signature not supported")
	// ErrMalformedSignature: the Signature header cannot be parsed.
	ErrMalformedSignature = errors.New("activitypub: malformed signature header")
	// ErrMissingSignedHeader: a header that must be signed is not in the
	// signed list (see *MissingSignedHeaderError).
	ErrMissingSignedHeader = errors.New("activitypub: required header not signed")
	// ErrDigestMismatch: the Digest header is absent, has no supported
	// algorithm, or does not match the body.
	ErrDigestMismatch = errors.New("activitypub: digest mismatch")
	// ErrDateOutOfWindow: the Date header is absent, unparseable, or outside
	// the accepted window.
	ErrDateOutOfWindow = errors.New("activitypub: date out of window")
	// ErrUnsupportedKey: the key is neither RSA nor Ed25519.
	ErrUnsupportedKey = errors.New("activitypub: unsupported key type")
	// ErrBadSignature: the signature does not verify with the key.
	ErrBadSignature = errors.New("activitypub: bad signature")
)

// MissingSignedHeaderError names the header missing from the signed list.
type MissingSignedHeaderError struct {
	// Header is the lower-case header name, or "(request-target)".
	Header string
}

func (e *MissingSignedHeaderError) Error() string {
	return fmt.Sprintf("activitypub: %q not in signed headers", e.Header)
}

// Unwrap makes the error match ErrMissingSignedHeader.
func (e *MissingSignedHeaderError) Unwrap() error { return ErrMissingSignedHeader }

// SignatureParams are the parameters of a draft-cavage Signature header.
type SignatureParams struct {
	// KeyID identifies the key (an actor's key URL).
	KeyID string
	// Algorithm is the header's claim; Verify ignores it and picks the
	// algorithm from the key.
	Algorithm string
	// Headers is the signed header list, lower case; ["date"] when the
	// header has no headers parameter (the draft's default).
	Headers []string
	// Signature is the base64 signature.
	Signature string
	// Created and Expires are the (created)/(expires) values, 0 when absent.
	Created, Expires int64
	// msg is set for an RFC 9421 signature (see rfc9421.go); Headers then
	// lists its covered components.
	msg *messageSignature
}

// maxSignatureHeader bounds the Signature header courier parses.
const maxSignatureHeader = 8 << 10

// ParseSignatureHeader parses a draft-cavage Signature header value (an
// Authorization value with the "Signature " scheme prefix is accepted too).
// It tolerates whitespace around parameters and commas, and requires keyId
// and signature. Errors wrap ErrMalformedSignature.
func ParseSignatureHeader(h string) (*SignatureParams, error) {
	if len(h) > maxSignatureHeader {
		return nil, fmt.Errorf("%w: header of %d bytes", ErrMalformedSignature, len(h))
	}
	s := strings.TrimSpace(h)
	if len(s) > 10 && strings.EqualFold(s[:10], "signature ") {
		s = s[10:]
	}
	p := &SignatureParams{}
	// Which parameters were seen: the draft's by bit, others by name (rare).
	var seenKnown uint8
	var seenOther []string
	for i := 0; i < len(s); {
		// Skip separators.
		for i < len(s) && (s[i] == ',' || s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i >= len(s) {
			break
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq <= 0 {
			return nil, fmt.Errorf("%w: parameter without value", ErrMalformedSignature)
		}
		name := strings.TrimSpace(s[i : i+eq])
		i += eq + 1
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		var val string
		if i < len(s) && s[i] == '"' {
			var closed bool
			val, i, closed = quotedValue(s, i+1)
			if !closed {
				return nil, fmt.Errorf("%w: unterminated value of %s", ErrMalformedSignature, name)
			}
		} else {
			end := strings.IndexByte(s[i:], ',')
			if end < 0 {
				end = len(s) - i
			}
			val = strings.TrimSpace(s[i : i+end])
			i += end
		}
		param := signatureParam(name)
		if param < 0 {
			key := strings.ToLower(name)
			if slices.Contains(seenOther, key) {
				return nil, fmt.Errorf("%w: duplicate %s", ErrMalformedSignature, name)
			}
			seenOther = append(seenOther, key)
			continue
		}
		if seenKnown&(1<<param) != 0 {
			return nil, fmt.Errorf("%w: duplicate %s", ErrMalformedSignature, name)
		}
		seenKnown |= 1 << param
		switch signatureParams[param] {
		case "keyid":
			p.KeyID = val
		case "algorithm":
			p.Algorithm = val
		case "headers":
			// Header names are ASCII tokens (RFC 9110, section 5.1): a list
			// holding any other byte names no header of the request, and
			// lower-casing it would turn each invalid byte into three.
			if !isASCII(val) {
				return nil, fmt.Errorf("%w: headers holds a byte outside ASCII", ErrMalformedSignature)
			}
			p.Headers = strings.Fields(strings.ToLower(val))
		case "signature":
			p.Signature = val
		case "created", "expires":
			key := signatureParams[param]
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("%w: bad %s", ErrMalformedSignature, key)
			}
			if key == "created" {
				p.Created = n
			} else {
				p.Expires = n
			}
		}
	}
	if p.KeyID == "" {
		return nil, fmt.Errorf("%w: no keyId", ErrMalformedSignature)
	}
	if p.Signature == "" {
		return nil, fmt.Errorf("%w: no signature", ErrMalformedSignature)
	}
	if seenKnown&(1<<paramHeaders) == 0 {
		p.Headers = []string{"date"}
	}
	if len(p.Headers) == 0 {
		return nil, fmt.Errorf("%w: empty headers", ErrMalformedSignature)
	}
	return p, nil
}

// isASCII reports whether s holds only ASCII bytes.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// signatureParams are the draft-cavage parameters courier reads, lower
// case; paramHeaders is the index of "headers".
var signatureParams = [...]string{"keyid", "algorithm", "headers", "signature", "created", "expires"}

const paramHeaders = 2

// signatureParam returns the index in signatureParams of the parameter
// name, compared as strings.ToLower(name) would be, or -1. ASCII names
// are compared in place, without allocating.
func signatureParam(name string) int {
	for j := 0; j < len(name); j++ {
		if name[j] >= utf8.RuneSelf {
			// Unicode case mapping can turn other runes into ASCII
			// letters (the Kelvin sign into k): ask strings.ToLower.
			return slices.Index(signatureParams[:], strings.ToLower(name))
		}
	}
	for k, want := range signatureParams {
		if len(name) != len(want) {
			continue
		}
		match := true
		for j := 0; j < len(name) && match; j++ {
			c := name[j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			match = c == want[j]
		}
		if match {
			return k
		}
	}
	return -1
}

// quotedValue reads the quoted-string value starting at s[i], just past its
// opening quote, with backslash escapes resolved. It returns the value, the
// index just past the closing quote, and whether there was one. A value
// without escapes is a substring of s.
func quotedValue(s string, i int) (string, int, bool) {
	start := i
	for i < len(s) {
		switch s[i] {
		case '"':
			return s[start:i], i + 1, true
		case '\\':
			if i+1 < len(s) {
				return unescapeQuoted(s, start)
			}
		}
		i++
	}
	return "", i, false
}

// unescapeQuoted is quotedValue for a value holding a backslash escape.
func unescapeQuoted(s string, i int) (string, int, bool) {
	var b strings.Builder
	for i < len(s) {
		c := s[i]
		if c == '\\' && i+1 < len(s) {
			b.WriteByte(s[i+1])
			i += 2
			continue
		}
		i++
		if c == '"' {
			return b.String(), i, true
		}
		b.WriteByte(c)
	}
	return "", i, false
}

// String renders the parameters as a canonical Signature header value (no
// whitespace after commas). Values are written unescaped; Verify refuses
// parameters holding a quote, backslash or comma, which this form cannot carry.
func (p *SignatureParams) String() string {
	var b strings.Builder
	b.WriteString(`keyId="` + p.KeyID + `"`)
	if p.Algorithm != "" {
		b.WriteString(`,algorithm="` + p.Algorithm + `"`)
	}
	if p.Created != 0 {
		fmt.Fprintf(&b, `,created=%d`, p.Created)
	}
	if p.Expires != 0 {
		fmt.Fprintf(&b, `,expires=%d`, p.Expires)
	}
	b.WriteString(`,headers="` + strings.Join(p.Headers, " ") + `",signature="` + p.Signature + `"`)
	return b.String()
}

// Signs reports whether the signature covers the header name (lower
// case), as a draft-cavage header or an RFC 9421 component.
func (p *SignatureParams) Signs(name string) bool { return p != nil && p.signed(name) }

// signed reports whether name is in the signed header list.
func (p *SignatureParams) signed(name string) bool {
	for _, h := range p.Headers {
		if h == name {
			return true
		}
	}
	return false
}

// RequestSignature returns the parsed signature of r: RFC 9421 when r
// carries Signature-Input, else draft-cavage, taken from the Signature
// header (or an Authorization header with the Signature scheme). It fails
// with ErrNoSignature, ErrRFC9421 or ErrMalformedSignature.
func RequestSignature(r *http.Request) (*SignatureParams, error) {
	if r.Header.Get("Signature-Input") != "" {
		return requestMessageSignature(r)
	}
	return requestCavageSignature(r)
}

// requestCavageSignature is RequestSignature for draft-cavage.
func requestCavageSignature(r *http.Request) (*SignatureParams, error) {
	h := r.Header.Get("Signature")
	if h == "" {
		if a := r.Header.Get("Authorization"); len(a) > 10 && strings.EqualFold(a[:10], "signature ") {
			h = a
		}
	}
	if h == "" {
		return nil, ErrNoSignature
	}
	return ParseSignatureHeader(h)
}

// RequestKeyID returns the keyId of r's signature, the key to resolve
// before calling Verify.
func RequestKeyID(r *http.Request) (string, error) {
	p, err := RequestSignature(r)
	if err != nil {
		return "", err
	}
	return p.KeyID, nil
}

// VerifyOptions tune Verify.
type VerifyOptions struct {
	// Window is how far the Date header may be from Now, in either
	// direction. Default 1 h (Mastodon accepts about 1 h ahead, 65 min behind).
	Window time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// RequireDigest requires a signed Digest even for an empty body. By
	// default a digest is required when the body is non-empty or the method
	// is POST, PUT or PATCH.
	RequireDigest bool
}

func (o VerifyOptions) withDefaults() VerifyOptions {
	if o.Window <= 0 {
		o.Window = time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Verify checks the draft-cavage HTTP signature of a server-side request
// whose body (already read, bounded by the caller) is body, against pub, the
// public key of the signature's keyId (see RequestKeyID). It requires
// (request-target), host and date — or (created) instead of date — in the
// signed headers, and digest when there is a body; checks Digest (SHA-256,
// and SHA-512 when present) against body; checks Date within the window;
// picks the algorithm from the key type (RSA: rsa-sha256; Ed25519), never
// from the header; and builds (request-target) from the raw request URI, so
// percent-encoded paths verify. r is not modified.
func Verify(r *http.Request, body []byte, pub crypto.PublicKey, opts VerifyOptions) error {
	p, err := RequestSignature(r)
	if err != nil {
		return err
	}
	return VerifySignature(r, p, body, pub, opts)
}

// VerifySignature is Verify for a caller that has already parsed r's
// signature with RequestSignature (to resolve the key of p.KeyID): it makes
// every check Verify makes, with p in place of a second parse of r's
// Signature header. p must be the signature of r; r is not modified.
func VerifySignature(r *http.Request, p *SignatureParams, body []byte, pub crypto.PublicKey, opts VerifyOptions) error {
	if p.IsMessageSignature() {
		return verifyMessageSignature(r, p, body, pub, opts)
	}
	algo, err := checkSignature(r, p, body, pub, opts)
	if err != nil {
		return err
	}

	// Verify with httpsig on a minimal request of its own: its
	// (request-target) is URL.Path + "?" + RawQuery, so give it the raw path;
	// give it a header map holding only what it reads: the canonical form of
	// the Signature header (its parser breaks on whitespace after commas)
	// and the signed headers, host among them (r.Host when set, else the
	// Host header), their values shared with r, which httpsig only reads.
	// Authorization is left out, as it may carry the signature itself and
	// httpsig refuses two signature headers.
	path, query := rawTarget(r)
	hdr := make(http.Header, len(p.Headers)+1)
	for _, h := range p.Headers {
		if strings.HasPrefix(h, "(") {
			continue
		}
		name := textproto.CanonicalMIMEHeaderKey(h)
		v, ok := r.Header[name]
		switch {
		case name == "Host" && r.Host != "":
			v, ok = []string{r.Host}, true
		case name == "Authorization" || name == "Signature":
			ok = false
		}
		if !ok {
			return fmt.Errorf("%w: signed header %q absent", ErrBadSignature, h)
		}
		hdr[name] = v
	}
	hdr["Signature"] = []string{p.String()}
	cp := &http.Request{
		Method: r.Method,
		URL:    &url.URL{Path: path, RawQuery: query},
		Host:   r.Host,
		Header: hdr,
	}
	v, err := httpsig.NewVerifier(cp)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMalformedSignature, err)
	}
	if err := v.Verify(pub, algo); err != nil {
		return fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	return nil
}

// checkSignature makes VerifySignature's checks that come before the
// signature itself: p's parameters, the key type, the signed header list,
// the digest and the dates. It returns the algorithm of pub.
func checkSignature(r *http.Request, p *SignatureParams, body []byte, pub crypto.PublicKey, opts VerifyOptions) (httpsig.Algorithm, error) {
	opts = opts.withDefaults()
	if p == nil {
		return "", ErrNoSignature
	}
	for _, v := range []string{p.KeyID, p.Algorithm, p.Signature} {
		if strings.ContainsAny(v, "\"\\,") {
			return "", fmt.Errorf("%w: unsupported character in a parameter", ErrMalformedSignature)
		}
	}
	var algo httpsig.Algorithm
	switch k := pub.(type) {
	case *rsa.PublicKey:
		algo = httpsig.RSA_SHA256
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			// httpsig would panic on it.
			return "", fmt.Errorf("%w: Ed25519 key of %d bytes", ErrUnsupportedKey, len(k))
		}
		algo = httpsig.ED25519
	default:
		return "", fmt.Errorf("%w: %T", ErrUnsupportedKey, pub)
	}
	if err := checkSignatureLength(p.Signature, pub); err != nil {
		return "", err
	}
	for _, h := range []string{httpsig.RequestTarget, "host"} {
		if !p.signed(h) {
			return "", &MissingSignedHeaderError{Header: h}
		}
	}
	if !p.signed("date") && !p.signed("(created)") {
		return "", &MissingSignedHeaderError{Header: "date"}
	}
	needDigest := opts.RequireDigest || len(body) > 0
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		needDigest = true
	}
	if needDigest && !p.signed("digest") {
		return "", &MissingSignedHeaderError{Header: "digest"}
	}
	if needDigest || r.Header.Get("Digest") != "" {
		if err := checkDigest(r.Header.Values("Digest"), body); err != nil {
			return "", err
		}
	}
	now := opts.Now()
	if p.signed("date") {
		date := r.Header.Get("Date")
		d, err := http.ParseTime(date)
		if err != nil {
			return "", fmt.Errorf("%w: unparseable Date", ErrDateOutOfWindow)
		}
		if skew := now.Sub(d); skew > opts.Window || skew < -opts.Window {
			return "", fmt.Errorf("%w: Date %s is %s from now", ErrDateOutOfWindow, date, skew.Round(time.Second))
		}
	}
	if p.Created != 0 {
		if skew := now.Sub(time.Unix(p.Created, 0)); skew > opts.Window || skew < -opts.Window {
			return "", fmt.Errorf("%w: created is %s from now", ErrDateOutOfWindow, skew.Round(time.Second))
		}
	}
	if p.Expires != 0 && now.After(time.Unix(p.Expires, 0)) {
		return "", fmt.Errorf("%w: signature expired", ErrDateOutOfWindow)
	}
	return algo, nil
}

// checkSignatureLength refuses a signature longer than pub's signatures can
// be (an RSA signature is as long as the modulus, an Ed25519 one 64 bytes),
// before anything decodes it.
func checkSignatureLength(sig string, pub crypto.PublicKey) error {
	size := ed25519.SignatureSize
	if k, ok := pub.(*rsa.PublicKey); ok {
		size = k.Size()
	}
	if max := base64.StdEncoding.EncodedLen(size); len(sig) > max {
		return fmt.Errorf("%w: signature of %d characters, more than the %d a %d-byte signature takes", ErrBadSignature, len(sig), max, size)
	}
	return nil
}

// rawTarget returns the path and query of r as they appeared on the wire.
func rawTarget(r *http.Request) (path, query string) {
	uri := r.RequestURI
	if uri == "" || uri == "*" {
		return r.URL.EscapedPath(), r.URL.RawQuery
	}
	if !strings.HasPrefix(uri, "/") {
		// Absolute form (http://host/path?query): drop scheme and authority.
		if i := strings.Index(uri, "://"); i >= 0 {
			rest := uri[i+3:]
			if j := strings.IndexByte(rest, '/'); j >= 0 {
				uri = rest[j:]
			} else {
				uri = "/"
				if q := strings.IndexByte(rest, '?'); q >= 0 {
					uri += rest[q:]
				}
			}
		}
	}
	if i := strings.IndexByte(uri, '#'); i >= 0 {
		uri = uri[:i]
	}
	if i := strings.IndexByte(uri, '?'); i >= 0 {
		return uri[:i], uri[i+1:]
	}
	return uri, ""
}

// checkDigest checks the Digest header values against body: at least one
// supported algorithm (SHA-256, SHA-512) must be present and every supported
// one present must match.
func checkDigest(values []string, body []byte) error {
	found := false
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			alg, b64, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok {
				continue
			}
			var sum []byte
			switch strings.ToUpper(alg) {
			case "SHA-256":
				s := sha256.Sum256(body)
				sum = s[:]
			case "SHA-512":
				s := sha512.Sum512(body)
				sum = s[:]
			default:
				continue
			}
			got, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
			if err != nil || subtle.ConstantTimeCompare(got, sum) != 1 {
				return fmt.Errorf("%w: %s", ErrDigestMismatch, strings.ToUpper(alg))
			}
			found = true
		}
	}
	if !found {
		return fmt.Errorf("%w: no SHA-256 or SHA-512 digest", ErrDigestMismatch)
	}
	return nil
}
