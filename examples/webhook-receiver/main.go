// Command webhook-receiver is a minimal application that receives
// courier's webhooks (docs/application-api.md): it verifies each POST's
// Standard Webhooks signature with the endpoint's secret, refuses a
// timestamp more than five minutes away, drops a message whose
// webhook-id it has already handled (courier delivers at least once: a
// retry carries the same id), and prints each new event as one JSON line
// on standard output.
//
//	WEBHOOK_SECRET=whsec_... go run ./examples/webhook-receiver -listen 127.0.0.1:3000
//
// then `courier admin webhooks add http://127.0.0.1:3000/ --actor alice`
// prints the secret to give it. It uses only the standard library. A real
// application keeps the ids it handled in its own database, in the
// transaction that applies the event, rather than in memory.
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Tolerance is how far webhook-timestamp may be from the receiver's clock.
const Tolerance = 5 * time.Minute

// maxBody bounds a message.
const maxBody = 1 << 20

// Event is a webhook's body: its type, when it happened, and its data.
type Event struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// Receiver verifies and deduplicates webhook messages.
type Receiver struct {
	keys [][]byte // the endpoint's secrets: two while one is rotated out
	now  func() time.Time
	out  io.Writer

	mu   sync.Mutex
	seen map[string]bool
}

// NewReceiver returns a Receiver for the secrets (whsec_...), printing
// each new event on out.
func NewReceiver(secrets []string, out io.Writer) (*Receiver, error) {
	r := &Receiver{now: time.Now, out: out, seen: map[string]bool{}}
	for _, s := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil || len(key) == 0 {
			return nil, errors.New("a secret is not whsec_ and base64")
		}
		r.keys = append(r.keys, key)
	}
	if len(r.keys) == 0 {
		return nil, errors.New("no secret")
	}
	return r, nil
}

// Verify checks the signature of a message: one of the space-separated
// "v1,<base64>" signatures of webhook-signature must be the HMAC-SHA256
// of "id.timestamp.body" with one of the secrets, and the timestamp must
// be within Tolerance.
func (r *Receiver) Verify(id, timestamp, signatures string, body []byte) error {
	if id == "" || timestamp == "" || signatures == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return errors.New("malformed webhook-timestamp")
	}
	if d := r.now().Sub(time.Unix(ts, 0)); d > Tolerance || d < -Tolerance {
		return errors.New("webhook-timestamp too far from now")
	}
	for _, key := range r.keys {
		m := hmac.New(sha256.New, key)
		fmt.Fprintf(m, "%s.%s.", id, timestamp)
		m.Write(body)
		want := m.Sum(nil)
		for _, sig := range strings.Fields(signatures) {
			v, b64, ok := strings.Cut(sig, ",")
			if !ok || v != "v1" {
				continue
			}
			got, err := base64.StdEncoding.DecodeString(b64)
			if err == nil && hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return errors.New("no valid signature")
}

// ServeHTTP receives one message: 401 when it does not verify, 400 when
// its body is not an event, 204 otherwise (a duplicate is acknowledged and
// dropped).
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	if err != nil {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	id := req.Header.Get("webhook-id")
	if err := r.Verify(id, req.Header.Get("webhook-timestamp"), req.Header.Get("webhook-signature"), body); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil || ev.Type == "" {
		http.Error(w, "not an event", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	dup := r.seen[id]
	r.seen[id] = true
	if !dup {
		line, _ := json.Marshal(map[string]any{"id": id, "type": ev.Type, "timestamp": ev.Timestamp, "data": ev.Data})
		fmt.Fprintf(r.out, "%s\n", line)
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:3000", "address to listen on")
	flag.Parse()
	// The secrets come from the environment, never from the command line:
	// WEBHOOK_SECRET, and during a rotation also WEBHOOK_SECRET_OLD.
	var secrets []string
	for _, name := range []string{"WEBHOOK_SECRET", "WEBHOOK_SECRET_OLD"} {
		if s := os.Getenv(name); s != "" {
			secrets = append(secrets, s)
		}
	}
	r, err := NewReceiver(secrets, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "webhook-receiver: WEBHOOK_SECRET: %v\n", err)
		os.Exit(2)
	}
	srv := &http.Server{Addr: *listen, Handler: r, ReadHeaderTimeout: 10 * time.Second}
	log.SetOutput(os.Stderr)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	// The address bound, so that -listen 127.0.0.1:0 says which port it took.
	log.Printf("webhook-receiver: listening on %s", ln.Addr())
	if err := srv.Serve(ln); err != nil {
		log.Fatal(err)
	}
}
