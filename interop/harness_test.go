// Package interop runs courier, as its users run it (the courier binary,
// its HTTP surface and its SQLite file), against an independent ActivityPub
// implementation: a peer built on Fedify (interop/fedify) and run with the
// machine's Node.js.
//
// The test is skipped unless interop/fedify/node_modules exists (after
// `npm ci` in interop/fedify) or COURIER_INTEROP is set; with COURIER_INTEROP
// set, anything missing (node, the installed modules) fails it instead, so a
// CI that means to run it cannot pass by skipping it.
//
// Nothing here imports a package of courier's: the test sees courier only
// from outside.
package interop

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // read-only look into courier's database
)

const (
	// peerDir holds the Fedify peer and its package files.
	peerDir = "fedify"
	// peer2Dir holds the package files of the same peer on the Fedify 2.x
	// line; its peer.mjs is a link to peerDir's.
	peer2Dir = "fedify2"
	// envPeerDir names another directory holding peer.mjs and its
	// node_modules, to run the same test against another Fedify release.
	envPeerDir = "COURIER_INTEROP_PEER_DIR"
	// envRequire makes a missing prerequisite a failure instead of a skip.
	envRequire = "COURIER_INTEROP"
	// envBinary names a prebuilt courier binary to use instead of building one.
	envBinary = "COURIER_BIN"

	// stepTimeout bounds every wait for something to arrive or change.
	stepTimeout = 30 * time.Second
	// startTimeout bounds the start of courier and of the peer.
	startTimeout = 60 * time.Second
	// stopGrace is how long a process may take to stop after SIGTERM.
	stopGrace = 10 * time.Second
	// maxLogLines bounds the lines kept of each process's output.
	maxLogLines = 400
	// maxLine bounds one line of process output.
	maxLine = 256 << 10
)

// required reports whether COURIER_INTEROP asks for the test to run.
func required() bool {
	switch strings.ToLower(os.Getenv(envRequire)) {
	case "", "0", "false", "no":
		return false
	}
	return true
}

// peerDirectory is the directory of the peer to run: $COURIER_INTEROP_PEER_DIR,
// else interop/fedify.
func peerDirectory() string {
	if d := os.Getenv(envPeerDir); d != "" {
		return d
	}
	return peerDir
}

// prerequisites skips the test when the peer is not installed and running
// it is not required, and fails it when something it needs is missing and
// it is required. It returns the node executable.
func prerequisites(t *testing.T, dir string) string {
	t.Helper()
	must := required() || os.Getenv(envPeerDir) != ""
	_, err := os.Stat(filepath.Join(dir, "node_modules"))
	installed := err == nil
	if !must && !installed {
		t.Skipf("skipped: the Fedify peer is not installed; run (cd interop/%s && npm ci --no-audit --no-fund), or set %s=1 to require it",
			dir, envRequire)
	}
	if !must && testing.Short() {
		t.Skip("skipped in -short mode; set " + envRequire + "=1 to run it")
	}
	var missing []string
	node, err := exec.LookPath("node")
	if err != nil {
		missing = append(missing, "node is not on PATH")
	}
	if _, err := os.Stat(filepath.Join(dir, "peer.mjs")); err != nil {
		missing = append(missing, fmt.Sprintf("%s has no peer.mjs", dir))
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@fedify", "fedify", "package.json")); err != nil {
		missing = append(missing, fmt.Sprintf("@fedify/fedify is not installed in %s: run npm ci --no-audit --no-fund there", dir))
	}
	if len(missing) > 0 {
		t.Fatalf("the interoperability test cannot run: %s", strings.Join(missing, "; "))
	}
	return node
}

// recordInputs opens every file under root that the result depends on
// without the test binary importing it: courier's sources and embedded files
// (built into the binary under test) and the peer's files. go test caches a
// passing result keyed by the files the test opened, so that a change to
// any of them runs the test again instead of reusing a stale pass.
func recordInputs(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while the walk ran
		}
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return f.Close()
	})
	if err != nil {
		t.Fatalf("recording the test's inputs: %v", err)
	}
	// The peer run (when it is not under root), and npm's record of what it
	// installed, which it rewrites on every install.
	for _, dir := range []string{peerDirectory(), peer2Dir} {
		for _, name := range []string{"peer.mjs", "package.json", filepath.Join("node_modules", ".package-lock.json")} {
			if f, err := os.Open(filepath.Join(dir, name)); err == nil {
				_ = f.Close()
			}
		}
	}
}

// courierBinary returns the courier binary to run: $COURIER_BIN, or one
// built from this module into a temporary directory (with -race when this
// test binary has it).
func courierBinary(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found above interop/: %v", err)
	}
	recordInputs(t, root)
	if bin := os.Getenv(envBinary); bin != "" {
		f, err := os.Open(bin)
		if err != nil {
			t.Fatalf("%s: %v", envBinary, err)
		}
		_ = f.Close()
		return bin
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("building courier: the go command is not on PATH (or set %s): %v", envBinary, err)
	}
	bin := filepath.Join(t.TempDir(), "courier")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/courier")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

// cleanEnv is the environment of the child processes: this process's,
// without courier's own settings, so that none leaks in from the shell.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "COURIER_") || strings.HasPrefix(name, "EVENT_") ||
			strings.HasPrefix(name, "NATS_") || strings.HasPrefix(name, "PEER_") ||
			name == "NODE_EXTRA_CA_CERTS" || name == "NODE_OPTIONS" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// lineLog keeps the last lines a process wrote, for the failure report.
type lineLog struct {
	name string

	mu    sync.Mutex
	lines []string
	drops int
}

func (l *lineLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == maxLogLines {
		copy(l.lines, l.lines[1:])
		l.lines = l.lines[:maxLogLines-1]
		l.drops++
	}
	l.lines = append(l.lines, line)
}

func (l *lineLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// dump logs the kept lines to t.
func (l *lineLog) dump(t *testing.T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.drops > 0 {
		t.Logf("--- %s (last %d lines; %d earlier lines not kept)", l.name, len(l.lines), l.drops)
	} else {
		t.Logf("--- %s (%d lines)", l.name, len(l.lines))
	}
	for _, s := range l.lines {
		t.Log(s)
	}
}

// lineWriter calls fn for each complete line written to it. A line longer
// than maxLine is cut.
type lineWriter struct {
	fn  func(string)
	buf []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := maxLine - len(w.buf)
			if room > 0 {
				w.buf = append(w.buf, p[:min(room, len(p))]...)
			}
			break
		}
		room := maxLine - len(w.buf)
		if room > 0 {
			w.buf = append(w.buf, p[:min(room, i)]...)
		}
		w.fn(string(w.buf))
		w.buf = w.buf[:0]
		p = p[i+1:]
	}
	return n, nil
}

// process starts cmd with stdout and stderr going to onStdout and onStderr
// line by line. When owner ends, the process is sent SIGTERM and awaited,
// and killed if it has not exited within stopGrace; an exit status other
// than 0 fails owner. The returned channel is closed when it has exited.
func process(owner *testing.T, cmd *exec.Cmd, onStdout, onStderr func(string)) (<-chan struct{}, error) {
	name := filepath.Base(cmd.Path)
	cmd.Stdout = &lineWriter{fn: onStdout}
	cmd.Stderr = &lineWriter{fn: onStderr}
	cmd.SysProcAttr = childAttr()
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = stopGrace
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	owner.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // fails only if it has exited
		select {
		case <-exited:
			// A process stopped by SIGTERM (or by the end of its stdin)
			// exits cleanly.
			if waitErr != nil {
				owner.Errorf("%s exited with %v", name, waitErr)
			}
			return
		case <-time.After(stopGrace):
		}
		_ = cmd.Process.Kill()
		select {
		case <-exited:
			owner.Errorf("%s did not stop within %s of SIGTERM and was killed", name, stopGrace)
		case <-time.After(stopGrace):
			owner.Errorf("%s did not exit after SIGKILL", name)
		}
	})
	return exited, nil
}

// courier is a running courier server behind an https reverse proxy, which
// is its public origin (its --base-url).
type courier struct {
	bin    string
	db     string
	origin string // https://127.0.0.1:port, the proxy
	proxy  *httptest.Server
	client *http.Client // trusts the proxy's certificate
	caFile string       // the proxy's certificate, PEM
	log    *lineLog
	exited <-chan struct{}
	target atomic.Pointer[url.URL]
	ro     *sql.DB

	mu         sync.Mutex
	inboxPosts []inboxPost // every POST to an inbox through the proxy, in order
}

// inboxPost is one POST to one of courier's inboxes and courier's answer,
// as the proxy saw them.
type inboxPost struct {
	Path string
	// RFC9421 is set when the request carried Signature-Input (an RFC 9421
	// signature), else it was signed draft-cavage (or not at all).
	RFC9421 bool
	Status  int
	// Digest is the body digest header the request carried (Content-Digest,
	// else Digest), which tells one POST from another.
	Digest string
}

// posts returns the inbox POSTs seen so far.
func (c *courier) posts() []inboxPost {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]inboxPost(nil), c.inboxPosts...)
}

// startCourier starts the TLS proxy and, behind it, `courier serve` on a
// fresh database in dir, and waits until it listens.
func startCourier(t *testing.T, ctx context.Context, bin, dir string) *courier {
	t.Helper()
	c := &courier{bin: bin, db: filepath.Join(dir, "courier.db"), log: &lineLog{name: "courier"}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(c.target.Load())
			// Keep the Host the peer signed; courier's ids use it anyway.
			r.Out.Host = r.In.Host
			r.SetXForwarded()
		},
		ModifyResponse: func(resp *http.Response) error {
			r := resp.Request
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/inbox") {
				c.mu.Lock()
				c.inboxPosts = append(c.inboxPosts, inboxPost{Path: r.URL.Path,
					RFC9421: r.Header.Get("Signature-Input") != "", Status: resp.StatusCode,
					Digest: cmp.Or(r.Header.Get("Content-Digest"), r.Header.Get("Digest"))})
				c.mu.Unlock()
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "courier is not reachable: "+err.Error(), http.StatusBadGateway)
		},
	}
	c.proxy = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.target.Load() == nil {
			http.Error(w, "courier is starting", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	c.proxy.StartTLS()
	t.Cleanup(c.proxy.Close)
	c.origin = c.proxy.URL
	c.client = c.proxy.Client()
	c.client.Timeout = stepTimeout
	c.caFile = filepath.Join(dir, "proxy-ca.pem")
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.proxy.Certificate().Raw})
	if err := os.WriteFile(c.caFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}

	listening := make(chan string, 1)
	cmd := exec.CommandContext(ctx, bin, "serve",
		"--db", c.db,
		"--listen", "127.0.0.1:0",
		"--ops-listen", "127.0.0.1:0",
		"--base-url", c.origin,
		"--allow-private-addresses",
		"--log-level", "debug",
	)
	cmd.Env = cleanEnv()
	cmd.Dir = dir
	onLine := func(line string) {
		c.log.add(line)
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" && rec.Addr != "" {
			select {
			case listening <- rec.Addr:
			default:
			}
		}
	}
	t.Cleanup(func() { // runs after the process has stopped
		if t.Failed() || testing.Verbose() {
			c.log.dump(t)
		}
	})
	exited, err := process(t, cmd, onLine, onLine)
	if err != nil {
		t.Fatal(err)
	}
	c.exited = exited
	select {
	case addr := <-listening:
		c.target.Store(&url.URL{Scheme: "http", Host: addr})
		c.openDatabase(t) // courier listens once its migrations are applied
	case <-c.exited:
		c.log.dump(t)
		t.Fatal("courier exited before it listened")
	case <-time.After(startTimeout):
		t.Fatalf("courier did not listen within %s", startTimeout)
	}
	return c
}

// createActor runs `courier actor create NAME --json` and returns the
// actor's id and outbox token.
func (c *courier) createActor(t *testing.T, ctx context.Context, name string) (id, token string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, "actor", "create", name, "--json",
		"--db", c.db, "--base-url", c.origin)
	cmd.Env = cleanEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("courier actor create %s: %v\n%s", name, err, stderr.Bytes())
	}
	var res struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.ID == "" || res.Token == "" {
		t.Fatalf("courier actor create %s printed %q: %v", name, out, err)
	}
	return res.ID, res.Token
}

// openDatabase opens courier's SQLite file read-only, for the test's
// checks (WAL readers do not block courier's writer).
func (c *courier) openDatabase(t *testing.T) {
	t.Helper()
	u := url.URL{Scheme: "file", OmitHost: true, Path: c.db,
		RawQuery: "mode=ro&_pragma=busy_timeout(5000)&_pragma=query_only(1)"}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		t.Fatalf("open courier's database read-only: %v", err)
	}
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		t.Fatalf("open courier's database read-only: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	c.ro = db
}

// database is courier's database, read-only.
func (c *courier) database() *sql.DB { return c.ro }

// raceReports returns the lines where a -race courier reported a data race.
func (c *courier) raceReports() []string {
	var out []string
	for _, l := range c.log.snapshot() {
		if strings.Contains(l, "WARNING: DATA RACE") {
			out = append(out, l)
		}
	}
	return out
}

// errorLogs returns courier's log records at error level.
func (c *courier) errorLogs() []string {
	var out []string
	for _, l := range c.log.snapshot() {
		var rec struct {
			Level string `json:"level"`
		}
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Level == "ERROR" {
			out = append(out, l)
		}
	}
	return out
}

// do sends an HTTP request to courier through its public origin. body, if
// not nil, is sent as application/activity+json.
func (c *courier) do(ctx context.Context, method, path, token string, body any) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := path
	if !strings.HasPrefix(path, "https://") {
		u = c.origin + path
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/activity+json")
	if body != nil {
		req.Header.Set("Content-Type", "application/activity+json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp, b, err
}

// peerEvent is one line the peer writes on stdout.
type peerEvent struct {
	Event  string `json:"event"`
	Origin string `json:"origin"`
	Actor  string `json:"actor"`

	// "ready": what the peer runs on.
	Software string `json:"software"`
	Node     string `json:"node"`

	// "received": an activity an inbox listener took (verified by Fedify).
	Recipient   *string     `json:"recipient"`
	Type        string      `json:"type"`
	ID          string      `json:"id"`
	To          []string    `json:"to"`
	Cc          []string    `json:"cc"`
	ObjectID    string      `json:"objectId"`
	Result      string      `json:"result"`
	Object      *peerObject `json:"object"`
	ObjectError string      `json:"objectError"`

	// "delivery": an inbox POST, with the peer's own signature check.
	Path          string          `json:"path"`
	Status        int             `json:"status"`
	KeyID         string          `json:"keyId"`
	Algorithm     string          `json:"algorithm"`
	SignedHeaders string          `json:"signedHeaders"`
	Scheme        string          `json:"scheme"` // "draft-cavage" or "rfc9421"
	ContentType   string          `json:"contentType"`
	Verified      bool            `json:"verified"`
	VerifiedKey   string          `json:"verifiedKey"`
	KeyOwner      string          `json:"keyOwner"`
	Activity      json.RawMessage `json:"activity"`
	// The body's SHA-256 (hex) and length, and Fedify's check of the
	// Object Integrity Proofs it carries (nil without any).
	BodySHA256 string     `json:"bodySha256"`
	BodyLength int        `json:"bodyLength"`
	Proof      *peerProof `json:"proof"`

	// "inbox_error", and a failed signature check.
	Error string `json:"error"`

	raw string
}

// peerObject is an object as the peer resolved it.
type peerObject struct {
	ID           string   `json:"id"`
	Type         string   `json:"type"`
	Content      string   `json:"content"`
	AttributedTo string   `json:"attributedTo"`
	InReplyTo    string   `json:"inReplyTo"`
	To           []string `json:"to"`
	Cc           []string `json:"cc"`
	Published    string   `json:"published"`
	Updated      string   `json:"updated"`

	// What Fedify's vocabulary read of the object beyond the above.
	Name        string                              `json:"name"`
	Tags        []struct{ Type, Name, Href string } `json:"tags"`
	Attachments []struct {
		Type, URL, MediaType, Name string
		Width, Height              *int
	} `json:"attachments"`
	Quote       string       `json:"quote"`
	QuoteURL    string       `json:"quoteUrl"`
	OneOf       []pollOption `json:"oneOf"`
	AnyOf       []pollOption `json:"anyOf"`
	VotersCount *int         `json:"votersCount"`
	EndTime     string       `json:"endTime"`
}

// peerProof is Fedify's check of an inbound activity's integrity proofs:
// verifyObject's verdict (every proof verifies and they authenticate the
// actor) and, per proof, what verifyProof found.
type peerProof struct {
	Verified bool   `json:"verified"`
	Error    string `json:"error"`
	Keys     []struct {
		Method      string `json:"method"`
		Cryptosuite string `json:"cryptosuite"`
		Verified    bool   `json:"verified"`
		Controller  string `json:"controller"`
	} `json:"keys"`
}

// sentCopy is one POST the peer made of an activity, as it reports it.
type sentCopy struct {
	Inbox  string `json:"inbox"`
	SHA256 string `json:"sha256"`
	Length int    `json:"length"`
	Digest string `json:"digest"`
	Status int    `json:"status"`
	Proofs []struct {
		Type, Cryptosuite, VerificationMethod string
	} `json:"proofs"`
}

// pollOption is a Question's option as Fedify read it.
type pollOption struct {
	Name  string `json:"name"`
	Votes *int   `json:"votes"`
}

// deliveredActivity is the id and type of a delivered activity.
func (e peerEvent) deliveredActivity() (id, typ string) {
	var a struct {
		ID   any `json:"id"`
		Type any `json:"type"`
	}
	_ = json.Unmarshal(e.Activity, &a)
	id, _ = a.ID.(string)
	typ, _ = a.Type.(string)
	return id, typ
}

// activityActor is the actor of a delivered activity.
func (e peerEvent) activityActor() string {
	var a struct {
		Actor any `json:"actor"`
	}
	_ = json.Unmarshal(e.Activity, &a)
	actor, _ := a.Actor.(string)
	return actor
}

// peer is the running Fedify peer.
type peer struct {
	origin   string
	actor    string
	software string // "@fedify/fedify VERSION on node VERSION"
	token    string
	client   *http.Client
	log      *lineLog
	stdin    io.Closer
	exited   <-chan struct{}

	mu      sync.Mutex
	events  []peerEvent
	changed chan struct{} // closed and replaced on each new event
}

// peerOptions configure a peer process.
type peerOptions struct {
	// caFile is a certificate the peer trusts for https.
	caFile string
	// keysFile keeps the actor's keys, so that a restarted peer has them.
	keysFile string
	// port is the port to listen on; 0 lets the kernel pick one.
	port int
	// name tells this process's log from another's.
	name string
	// dir is the peer's directory (default peerDirectory()).
	dir string
}

// startPeer runs `node peer.mjs` and waits for its ready line. Failures
// are reported to t; the process belongs to owner (t itself, or the test
// that outlives t's subtest), which stops it and reports its log when it
// ends.
func startPeer(t, owner *testing.T, ctx context.Context, node string, opts peerOptions) *peer {
	t.Helper()
	p := &peer{
		token:   randomToken(t),
		client:  &http.Client{Timeout: stepTimeout},
		log:     &lineLog{name: opts.name},
		changed: make(chan struct{}),
	}
	// peer.mjs may be a link (fedify2's is): resolve its imports from the
	// directory it is run in, whose node_modules holds its Fedify.
	cmd := exec.CommandContext(ctx, node, "--preserve-symlinks", "--preserve-symlinks-main", "peer.mjs")
	cmd.Dir = opts.dir
	if cmd.Dir == "" {
		cmd.Dir = peerDirectory()
	}
	cmd.Env = cleanEnv(
		"PEER_CONTROL_TOKEN="+p.token,
		"PEER_LOG_LEVEL=info",
		"PEER_PORT="+strconv.Itoa(opts.port),
		"PEER_KEYS_FILE="+opts.keysFile,
		"NODE_EXTRA_CA_CERTS="+opts.caFile,
	)
	// The peer exits when its stdin closes, so it cannot outlive this test
	// even if the test binary is killed.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = stdin
	owner.Cleanup(func() { // runs after the process has stopped
		_ = stdin.Close()
		if owner.Failed() || testing.Verbose() {
			p.log.dump(owner)
		}
	})
	exited, err := process(owner, cmd, p.onStdout, func(line string) { p.log.add("stderr: " + line) })
	if err != nil {
		t.Fatal(err)
	}
	p.exited = exited
	ready, err := p.wait(startTimeout, func(e peerEvent) bool { return e.Event == "ready" })
	if err != nil {
		p.log.dump(t)
		t.Fatalf("%s: %v", opts.name, err)
	}
	p.origin, p.actor = ready.Origin, ready.Actor
	p.software = ready.Software + " on node " + ready.Node
	return p
}

// stop ends the peer (it exits when its stdin closes) and waits for it.
func (p *peer) stop() error {
	_ = p.stdin.Close()
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopGrace):
		return fmt.Errorf("the peer did not exit within %s of its stdin closing", stopGrace)
	}
}

func (p *peer) onStdout(line string) {
	p.log.add(line)
	var e peerEvent
	if err := json.Unmarshal([]byte(line), &e); err != nil || e.Event == "" {
		return
	}
	e.raw = line
	p.mu.Lock()
	p.events = append(p.events, e)
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// wait returns the first event (in arrival order) that match accepts,
// waiting up to timeout for it to arrive.
func (p *peer) wait(timeout time.Duration, match func(peerEvent) bool) (peerEvent, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen := 0
	for {
		p.mu.Lock()
		events, changed := p.events, p.changed
		p.mu.Unlock()
		for ; seen < len(events); seen++ {
			if match(events[seen]) {
				return events[seen], nil
			}
		}
		select {
		case <-changed:
		case <-p.exited:
			return peerEvent{}, errors.New("the peer exited")
		case <-deadline.C:
			return peerEvent{}, fmt.Errorf("nothing matching arrived within %s", timeout)
		}
	}
}

// all returns the events so far.
func (p *peer) all() []peerEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]peerEvent(nil), p.events...)
}

// control calls the peer's control endpoint name with req and decodes its
// answer into res. A non-200 answer is an error carrying the peer's message
// (Fedify's, with the remote status when a delivery failed).
func (p *peer) control(ctx context.Context, name string, req, res any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, p.origin+"/_control/"+name, bytes.NewReader(b))
	if err != nil {
		return err
	}
	r.Header.Set("Authorization", "Bearer "+p.token)
	r.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(r)
	if err != nil {
		return fmt.Errorf("peer %s: %w", name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("peer %s: %w", name, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("peer %s: %s: %s", name, resp.Status, body)
	}
	if err := json.Unmarshal(body, res); err != nil {
		return fmt.Errorf("peer %s: answer %q: %w", name, body, err)
	}
	return nil
}

func randomToken(t *testing.T) string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// eventually calls check until it returns nil, up to stepTimeout, with a
// short pause between calls; it returns check's last error.
func eventually(ctx context.Context, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	pause := 20 * time.Millisecond
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %s: %w", stepTimeout, err)
		case <-time.After(pause):
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}
