package activitypub

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// RFC 9421 HTTP Message Signatures, beside the draft-cavage signatures of
// verify.go and sign.go. A request carrying Signature-Input is verified as
// RFC 9421 (RequestSignature returns its parameters, VerifySignature checks
// them); SignMessage signs a request with it.

// RFC 9421 algorithm names courier signs and verifies.
const (
	AlgRSAv15SHA256 = "rsa-v1_5-sha256"
	AlgRSAPSSSHA512 = "rsa-pss-sha512"
	AlgEd25519      = "ed25519"
)

// messageSignature is one RFC 9421 signature of a request: its
// Signature-Input member and its Signature bytes.
type messageSignature struct {
	label      string
	components []sfItem
	params     []sfParam
	sig        []byte
}

// maxSignatureInput bounds the Signature-Input and Signature fields
// courier parses.
const maxSignatureInput = 8 << 10

// requestMessageSignature parses r's RFC 9421 signature. Of several
// signatures, the first (in Signature-Input order) that has a keyid and a
// Signature member is taken. A request whose Signature header is a
// draft-cavage one beside a stray Signature-Input is taken as draft-cavage.
// Errors wrap ErrMalformedSignature.
func requestMessageSignature(r *http.Request) (*SignatureParams, error) {
	p, err := parseMessageSignature(r)
	if err != nil {
		if cp, cerr := requestCavageSignature(r); cerr == nil {
			return cp, nil
		}
	}
	return p, err
}

func parseMessageSignature(r *http.Request) (*SignatureParams, error) {
	input := strings.Join(r.Header.Values("Signature-Input"), ", ")
	sigs := strings.Join(r.Header.Values("Signature"), ", ")
	if len(input) > maxSignatureInput || len(sigs) > maxSignatureInput {
		return nil, fmt.Errorf("%w: Signature-Input or Signature over %d bytes", ErrMalformedSignature, maxSignatureInput)
	}
	if sigs == "" {
		return nil, fmt.Errorf("%w: Signature-Input without Signature", ErrMalformedSignature)
	}
	inputs, err := parseSFDictionary(input)
	if err != nil {
		return nil, fmt.Errorf("%w: Signature-Input: %w", ErrMalformedSignature, err)
	}
	values, err := parseSFDictionary(sigs)
	if err != nil {
		return nil, fmt.Errorf("%w: Signature: %w", ErrMalformedSignature, err)
	}
	for _, in := range inputs {
		if !in.list {
			continue
		}
		var sig []byte
		for _, v := range values {
			if b, ok := v.item.value.([]byte); ok && v.key == in.key && !v.list {
				sig = b
			}
		}
		if sig == nil {
			continue
		}
		p := &SignatureParams{Signature: base64.StdEncoding.EncodeToString(sig)}
		for _, prm := range in.params {
			switch prm.key {
			case "keyid":
				p.KeyID, _ = prm.value.(string)
			case "alg":
				p.Algorithm, _ = prm.value.(string)
			case "created", "expires":
				n, ok := prm.value.(int64)
				if !ok || n <= 0 {
					return nil, fmt.Errorf("%w: bad %s", ErrMalformedSignature, prm.key)
				}
				if prm.key == "created" {
					p.Created = n
				} else {
					p.Expires = n
				}
			}
		}
		if p.KeyID == "" {
			continue
		}
		for _, c := range in.inner {
			name, ok := c.value.(string)
			if !ok {
				return nil, fmt.Errorf("%w: a component identifier is not a string", ErrMalformedSignature)
			}
			p.Headers = append(p.Headers, name)
		}
		p.msg = &messageSignature{label: in.key, components: in.inner, params: in.params, sig: sig}
		return p, nil
	}
	return nil, fmt.Errorf("%w: no RFC 9421 signature with a keyid and a value", ErrMalformedSignature)
}

// IsMessageSignature reports whether p is an RFC 9421 signature (as
// opposed to a draft-cavage one).
func (p *SignatureParams) IsMessageSignature() bool { return p != nil && p.msg != nil }

// verifyMessageSignature is VerifySignature for an RFC 9421 signature. It
// requires @method, @target-uri (or @authority and @path) and, for a body
// or a POST, PUT or PATCH, content-digest, checked against body (RFC 9530,
// sha-256 or sha-512); created, within opts.Window of now; expires, when
// present, not past; a signed Date within the window. The algorithm comes
// from pub: an RSA key verifies rsa-v1_5-sha256 or rsa-pss-sha512 (the alg
// parameter, when present, must name one of them), an Ed25519 key ed25519.
func verifyMessageSignature(r *http.Request, p *SignatureParams, body []byte, pub crypto.PublicKey, opts VerifyOptions) error {
	opts = opts.withDefaults()
	m := p.msg
	covered := func(name string) bool {
		for _, c := range m.components {
			if c.value == name {
				return true
			}
		}
		return false
	}
	if !covered("@method") {
		return &MissingSignedHeaderError{Header: "@method"}
	}
	if !covered("@target-uri") {
		for _, h := range []string{"@authority", "@path"} {
			if !covered(h) {
				return &MissingSignedHeaderError{Header: "@target-uri"}
			}
		}
	}
	needDigest := opts.RequireDigest || len(body) > 0
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		needDigest = true
	}
	if needDigest && !covered("content-digest") {
		return &MissingSignedHeaderError{Header: "content-digest"}
	}
	if needDigest || r.Header.Get("Content-Digest") != "" {
		if err := checkContentDigest(r.Header.Values("Content-Digest"), body); err != nil {
			return err
		}
	}
	now := opts.Now()
	if p.Created == 0 {
		return fmt.Errorf("%w: no created parameter", ErrDateOutOfWindow)
	}
	if skew := now.Sub(time.Unix(p.Created, 0)); skew > opts.Window || skew < -opts.Window {
		return fmt.Errorf("%w: created is %s from now", ErrDateOutOfWindow, skew.Round(time.Second))
	}
	if p.Expires != 0 && now.After(time.Unix(p.Expires, 0)) {
		return fmt.Errorf("%w: signature expired", ErrDateOutOfWindow)
	}
	if covered("date") {
		d, err := http.ParseTime(r.Header.Get("Date"))
		if err != nil {
			return fmt.Errorf("%w: unparseable Date", ErrDateOutOfWindow)
		}
		if skew := now.Sub(d); skew > opts.Window || skew < -opts.Window {
			return fmt.Errorf("%w: Date is %s from now", ErrDateOutOfWindow, skew.Round(time.Second))
		}
	}
	algs, err := messageAlgorithms(pub, p.Algorithm)
	if err != nil {
		return err
	}
	// The scheme of @target-uri: known when the connection is TLS; behind a
	// proxy it may be either, so both are tried (the authority and path
	// are signed either way).
	schemes := []string{"https", "http"}
	if r.TLS != nil {
		schemes = schemes[:1]
	}
	var lastErr error
	for _, scheme := range schemes {
		base, err := messageSignatureBase(r, scheme, m.components, m.params)
		if err != nil {
			return err
		}
		for _, alg := range algs {
			if lastErr = verifyMessageBytes(alg, pub, []byte(base), m.sig); lastErr == nil {
				return nil
			}
		}
		if !covered("@target-uri") && !covered("@scheme") {
			break // the scheme is not part of the base
		}
	}
	return lastErr
}

// messageAlgorithms returns the algorithms pub may have signed with: the
// key decides, the alg parameter only chooses among the key's own.
func messageAlgorithms(pub crypto.PublicKey, alg string) ([]string, error) {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		switch alg {
		case "":
			return []string{AlgRSAv15SHA256, AlgRSAPSSSHA512}, nil
		case AlgRSAv15SHA256, AlgRSAPSSSHA512:
			return []string{alg}, nil
		}
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: Ed25519 key of %d bytes", ErrUnsupportedKey, len(k))
		}
		if alg == "" || alg == AlgEd25519 {
			return []string{AlgEd25519}, nil
		}
	default:
		return nil, fmt.Errorf("%w: %T", ErrUnsupportedKey, pub)
	}
	return nil, fmt.Errorf("%w: alg %q does not fit a %T key", ErrBadSignature, alg, pub)
}

// verifyMessageBytes checks sig over base with pub under alg.
func verifyMessageBytes(alg string, pub crypto.PublicKey, base, sig []byte) error {
	var err error
	switch alg {
	case AlgRSAv15SHA256:
		sum := sha256.Sum256(base)
		err = rsa.VerifyPKCS1v15(pub.(*rsa.PublicKey), crypto.SHA256, sum[:], sig)
	case AlgRSAPSSSHA512:
		sum := sha512.Sum512(base)
		err = rsa.VerifyPSS(pub.(*rsa.PublicKey), crypto.SHA512, sum[:], sig, &rsa.PSSOptions{SaltLength: 64})
	case AlgEd25519:
		if !ed25519.Verify(pub.(ed25519.PublicKey), base, sig) {
			err = errors.New("ed25519 verification failed")
		}
	default:
		err = fmt.Errorf("algorithm %q", alg)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadSignature, alg, err)
	}
	return nil
}

// signMessageBytes signs base with key under alg.
func signMessageBytes(alg string, key crypto.Signer, base []byte) ([]byte, error) {
	switch alg {
	case AlgRSAv15SHA256:
		sum := sha256.Sum256(base)
		return key.Sign(rand.Reader, sum[:], crypto.SHA256)
	case AlgRSAPSSSHA512:
		sum := sha512.Sum512(base)
		return key.Sign(rand.Reader, sum[:], &rsa.PSSOptions{SaltLength: 64, Hash: crypto.SHA512})
	case AlgEd25519:
		return key.Sign(nil, base, crypto.Hash(0))
	}
	return nil, fmt.Errorf("algorithm %q", alg)
}

// messageSignatureBase builds the signature base (RFC 9421 section 2.5) of
// request r over components and the signature parameters params; scheme is
// the scheme of @target-uri and @scheme.
func messageSignatureBase(r *http.Request, scheme string, components []sfItem, params []sfParam) (string, error) {
	var b strings.Builder
	seen := make(map[string]bool, len(components))
	for _, c := range components {
		name, ok := c.value.(string)
		if !ok || name == "" || strings.ToLower(name) != name {
			return "", fmt.Errorf("%w: bad component identifier %v", ErrMalformedSignature, c.value)
		}
		var id strings.Builder
		serializeSFBare(&id, name)
		serializeSFParams(&id, c.params)
		if seen[id.String()] {
			return "", fmt.Errorf("%w: component %s covered twice", ErrMalformedSignature, id.String())
		}
		seen[id.String()] = true
		values, err := componentValues(r, scheme, name, c.params)
		if err != nil {
			return "", err
		}
		for _, v := range values {
			b.WriteString(id.String())
			b.WriteString(": ")
			b.WriteString(v)
			b.WriteByte('\n')
		}
	}
	b.WriteString(`"@signature-params": `)
	serializeSFInnerList(&b, components, params)
	return b.String(), nil
}

// componentValues returns the value (or, for @query-param, the values) of
// one covered component of request r.
func componentValues(r *http.Request, scheme, name string, params []sfParam) ([]string, error) {
	var qname string
	for _, p := range params {
		if p.key == "name" && name == "@query-param" {
			if s, ok := p.value.(string); ok {
				qname = s
				continue
			}
		}
		return nil, fmt.Errorf("%w: component parameter %q of %s is not supported", ErrRFC9421, p.key, name)
	}
	path, query := rawTarget(r)
	if path == "" {
		path = "/"
	}
	authority := strings.ToLower(r.Host)
	if authority == "" && r.URL != nil {
		authority = strings.ToLower(r.URL.Host)
	}
	switch name {
	case "@method":
		return []string{r.Method}, nil
	case "@scheme":
		return []string{scheme}, nil
	case "@authority":
		return []string{authority}, nil
	case "@path":
		return []string{path}, nil
	case "@query":
		return []string{"?" + query}, nil
	case "@request-target":
		if query != "" {
			return []string{path + "?" + query}, nil
		}
		return []string{path}, nil
	case "@target-uri":
		u := scheme + "://" + authority + path
		if query != "" {
			u += "?" + query
		}
		return []string{u}, nil
	case "@query-param":
		if qname == "" {
			return nil, fmt.Errorf("%w: @query-param without a name", ErrMalformedSignature)
		}
		var out []string
		for _, pair := range strings.Split(query, "&") {
			k, v, _ := strings.Cut(pair, "=")
			dk, err1 := url.QueryUnescape(k)
			dv, err2 := url.QueryUnescape(v)
			if err1 != nil || err2 != nil || dk != qname {
				continue
			}
			out = append(out, url.QueryEscape(dv))
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%w: covered query parameter %q absent", ErrBadSignature, qname)
		}
		return out, nil
	}
	if strings.HasPrefix(name, "@") {
		return nil, fmt.Errorf("%w: component %s is not supported", ErrRFC9421, name)
	}
	var values []string
	if name == "host" {
		values = []string{authority}
	} else {
		values = r.Header.Values(name)
	}
	if len(values) == 0 {
		return nil, fmt.Errorf("%w: covered field %q absent", ErrBadSignature, name)
	}
	out := make([]string, len(values))
	for k, v := range values {
		out[k] = strings.Trim(v, " \t")
	}
	return []string{strings.Join(out, ", ")}, nil
}

// checkContentDigest checks Content-Digest (RFC 9530) against body: at
// least one of sha-256 and sha-512 must be present and every one of them
// present must match.
func checkContentDigest(values []string, body []byte) error {
	members, err := parseSFDictionary(strings.Join(values, ", "))
	if err != nil {
		return fmt.Errorf("%w: Content-Digest: %v", ErrDigestMismatch, err)
	}
	found := false
	for _, m := range members {
		got, ok := m.item.value.([]byte)
		if !ok || m.list {
			continue
		}
		var sum []byte
		switch m.key {
		case "sha-256":
			s := sha256.Sum256(body)
			sum = s[:]
		case "sha-512":
			s := sha512.Sum512(body)
			sum = s[:]
		default:
			continue
		}
		if subtle.ConstantTimeCompare(got, sum) != 1 {
			return fmt.Errorf("%w: Content-Digest %s", ErrDigestMismatch, m.key)
		}
		found = true
	}
	if !found {
		return fmt.Errorf("%w: no sha-256 or sha-512 Content-Digest", ErrDigestMismatch)
	}
	return nil
}

// ContentDigest returns the Content-Digest value (RFC 9530, sha-256) of body.
func ContentDigest(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"
}

// messageLabel is the label of the signatures courier writes.
const messageLabel = "sig1"

// SignMessage signs req with an RFC 9421 HTTP Message Signature as keyID,
// with key: rsa-v1_5-sha256 for an RSA key (what Mastodon verifies),
// ed25519 for an Ed25519 key. It covers "@method" "@target-uri" and, when
// body is non-nil, "content-type" "content-digest" (and
// "collection-synchronization" when set: FEP-8fcf) (setting Content-Digest,
// sha-256 of body, and a Content-Type, ContentType unless already set), with
// created (from now), keyid and alg. It sets Date too, which draft-cavage
// peers and logs expect. Earlier Digest, Signature and Signature-Input
// headers are removed, so a request may be signed again.
//
// body must be the exact bytes sent as the request body; req.Body is not read.
func SignMessage(req *http.Request, body []byte, keyID string, key crypto.Signer, now time.Time) error {
	var alg string
	switch key.(type) {
	case *rsa.PrivateKey:
		alg = AlgRSAv15SHA256
	case ed25519.PrivateKey:
		alg = AlgEd25519
	default:
		return fmt.Errorf("%w: RFC 9421 with a %T key", ErrSign, key)
	}
	return signMessage(req, body, keyID, key, alg, now)
}

func signMessage(req *http.Request, body []byte, keyID string, key crypto.Signer, alg string, now time.Time) error {
	host, err := signTarget(req, keyID, key != nil)
	if err != nil {
		return err
	}
	for _, h := range []string{"Digest", "Signature", "Signature-Input", "Content-Digest"} {
		req.Header.Del(h)
	}
	req.Header.Set("Date", now.UTC().Format(http.TimeFormat))
	components := []sfItem{{value: "@method"}, {value: "@target-uri"}}
	if body != nil {
		if req.Header.Get("Content-Type") == "" {
			req.Header.Set("Content-Type", ContentType)
		}
		req.Header.Set("Content-Digest", ContentDigest(body))
		components = append(components, sfItem{value: "content-type"}, sfItem{value: "content-digest"})
		if req.Header.Get(CollectionSyncHeader) != "" {
			components = append(components, sfItem{value: "collection-synchronization"})
		}
	}
	params := []sfParam{
		{key: "created", value: now.Unix()},
		{key: "keyid", value: keyID},
		{key: "alg", value: alg},
	}
	// The base is built from a request as a server sees it: Host set, the
	// path as sent on the wire.
	cp := &http.Request{Method: req.Method, Host: host, URL: req.URL, Header: req.Header, RequestURI: req.URL.RequestURI()}
	scheme := req.URL.Scheme
	if scheme == "" {
		scheme = "https"
	}
	base, err := messageSignatureBase(cp, scheme, components, params)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSign, err)
	}
	sig, err := signMessageBytes(alg, key, []byte(base))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSign, err)
	}
	var in strings.Builder
	in.WriteString(messageLabel + "=")
	serializeSFInnerList(&in, components, params)
	req.Header.Set("Signature-Input", in.String())
	req.Header.Set("Signature", messageLabel+"=:"+base64.StdEncoding.EncodeToString(sig)+":")
	return nil
}

// SignMessage signs req as s with RFC 9421 and its RSA key
// (rsa-v1_5-sha256); see the function SignMessage.
func (s Signer) SignMessage(req *http.Request, body []byte, now time.Time) error {
	if s.Key == nil {
		return fmt.Errorf("%w: no RSA key", ErrSign)
	}
	return SignMessage(req, body, s.KeyID, s.Key, now)
}

// SignMessageEd25519 signs req as s with RFC 9421 and its Ed25519 key.
func (s Signer) SignMessageEd25519(req *http.Request, body []byte, now time.Time) error {
	if len(s.Ed25519) != ed25519.PrivateKeySize || s.Ed25519KeyID == "" {
		return fmt.Errorf("%w: no Ed25519 key", ErrSign)
	}
	return SignMessage(req, body, s.Ed25519KeyID, s.Ed25519, now)
}
