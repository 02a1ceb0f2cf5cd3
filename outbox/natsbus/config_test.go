package natsbus

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/courier-ap/courier/outbox"
)

func TestParseMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    Mode
		wantErr bool
	}{
		{"", ModeJetStream, false},
		{"jetstream", ModeJetStream, false},
		{" JetStream ", ModeJetStream, false},
		{"core", ModeCore, false},
		{"CORE", ModeCore, false},
		{"kafka", "", true},
		{"js", "", true},
	} {
		got, err := ParseMode(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestValidateURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"nats://127.0.0.1:4222", true},
		{"127.0.0.1:4222", true},
		{"localhost", true},
		{"tls://nats.example:4443", true},
		{"nats://a:4222, nats://b:4222", true},
		{"ws://nats.example:8080", true},
		{"nats://user:pass@127.0.0.1:4222", true},
		{"", false},
		{"   ", false},
		{"http://127.0.0.1:4222", false},
		{"nats://", false},
		{"nats://host:notaport", false},
		{"nats://host:70000", false},
		{"nats://host:", false},
		{"nats://a:4222,,nats://b:4222", false},
		{"nats://[::1", false},
	} {
		err := ValidateURL(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateURL(%q) = %v; want ok %v", tc.in, err, tc.ok)
		}
	}
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	c := Config{DB: db.Write}.withDefaults()
	if c.URL != DefaultURL || c.Mode != ModeJetStream || c.Stream != DefaultStream || c.Consumer != DefaultConsumer ||
		c.MaxAttempts != outbox.DefaultMaxAttempts || c.AckWait != DefaultAckWait || c.Lease != DefaultLease {
		t.Errorf("defaults not applied: %+v", c)
	}
	if err := c.validate(); err != nil {
		t.Errorf("default config invalid: %v", err)
	}
	runner := newRunner(t, db, outbox.NewRegistry(), 7, time.Minute, nil)
	if got := (Config{DB: db.Write, Runner: runner}).withDefaults().MaxAttempts; got != 7 {
		t.Errorf("MaxAttempts from runner = %d, want 7", got)
	}
	for name, bad := range map[string]Config{
		"no db":         {},
		"bad mode":      {DB: db.Write, Mode: "fast"},
		"bad url":       {DB: db.Write, URL: "http://x"},
		"dotted stream": {DB: db.Write, Stream: "A.B"},
		"wild prefix":   {DB: db.Write, SubjectPrefix: "courier.*"},
		"short max age": {DB: db.Write, StreamMaxAge: time.Minute},
		"batch > fly":   {DB: db.Write, BatchSize: 10, MaxInFlight: 5},
	} {
		if _, err := New(bad); err == nil {
			t.Errorf("%s: New accepted %+v", name, bad)
		}
	}
}

func TestSubjectFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ typ, want string }{
		{"delivery.post", "courier.events.delivery.post"},
		{"inbox.import", "courier.events.inbox.import"},
		{"a b", "courier.events.a_b"},
		{"x.*.>", "courier.events.x._._"},
		{"", "courier.events._"},
		{"a..b", "courier.events.a._.b"},
		{".lead", "courier.events._.lead"},
		{"trail.", "courier.events.trail._"},
		{"tab\there", "courier.events.tab_here"},
	} {
		got := subjectFor("courier.events", tc.typ)
		if got != tc.want {
			t.Errorf("subjectFor(%q) = %q, want %q", tc.typ, got, tc.want)
		}
		if !validSubject(got) {
			t.Errorf("subjectFor(%q) = %q is not a valid literal subject", tc.typ, got)
		}
	}
}

func TestEncodeDecode(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 7, 0, 0, 123456789, time.UTC)
	ev := outbox.Event{ID: "0b6f2a4c-7a8e-4f0e-9a57-3f1f8d0f3b21", Type: "delivery.post", Target: "remote.example",
		Payload: json.RawMessage(`{"inbox":"https://remote.example/inbox"}`), OccurredAt: at}
	m := encode("courier.events", ev)
	if m.Subject != "courier.events.delivery.post" {
		t.Errorf("subject %q", m.Subject)
	}
	got, err := decode(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != ev.ID || got.Type != ev.Type || got.Target != ev.Target || string(got.Payload) != string(ev.Payload) ||
		!got.OccurredAt.Equal(at) {
		t.Errorf("round trip: got %+v, want %+v", got, ev)
	}

	for name, h := range map[string]nats.Header{
		"no type":  {HeaderEventID: {"x"}},
		"bad time": {HeaderEventType: {"t"}, HeaderOccurredAt: {"yesterday"}},
	} {
		if _, err := decode(h, []byte(`{}`)); !errors.Is(err, errBadMessage) {
			t.Errorf("%s: err = %v, want errBadMessage", name, err)
		}
	}
	if _, err := decode(nats.Header{HeaderEventType: {"t"}}, []byte(`{not json`)); !errors.Is(err, errBadMessage) {
		t.Errorf("bad payload: err = %v", err)
	}
	if id := msgID(42, ""); id != "courier-row-42" {
		t.Errorf("msgID without event id = %q", id)
	}
	if a, b := replayMsgID("e", 1), replayMsgID("e", 2); a == b || a == "e" {
		t.Errorf("replay ids %q %q must differ from each other and from the event id", a, b)
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	if got := truncate("héllo", 2); got != "h" {
		t.Errorf("truncate split a rune: %q", got)
	}
	if got := truncate("abc", 5); got != "abc" {
		t.Errorf("truncate short: %q", got)
	}
}

func TestServerAtLeast(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    string
		want bool
	}{
		{"2.9.10", false},
		{"2.10.3", false},
		{"2.10.4", true},
		{"2.10.22", true},
		{"2.15.2", true},
		{"3.0.0", true},
		{"2.11.0-beta.1", true},
		{"", false},
		{"2.x.1", false},
	} {
		if got := serverAtLeast(tc.v, 2, 10, 4); got != tc.want {
			t.Errorf("serverAtLeast(%q, 2.10.4) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	got := redactURL("nats://alice:s3cret@a.example:4222, tok3n@b.example:4222,nats://c.example")
	if strings.Contains(got, "s3cret") || strings.Contains(got, "tok3n") || strings.Contains(got, "alice") {
		t.Errorf("credentials left in %q", got)
	}
	if !strings.Contains(got, "a.example:4222") || !strings.Contains(got, "nats://c.example") {
		t.Errorf("hosts lost in %q", got)
	}
	for _, bad := range []string{"http://alice:s3cret@h:1", "nats://alice:s3cret@h:x", "nats://alice:s3cret@[::1"} {
		if err := ValidateURL(bad); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ValidateURL(%q) = %v: want an error without the password", bad, err)
		}
	}
}
