package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// A form's back target is followed only within the console: anything else
// (another host, a scheme-relative URL, a header injection) goes to the
// fallback.
func TestBackStaysInTheConsole(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ back, want string }{
		{"/console/events?status=pending", "/console/events?status=pending"},
		{"", "/console/hosts"},
		{"https://evil.example/", "/console/hosts"},
		{"//evil.example/console/", "/console/hosts"},
		{"/console/\\evil", "/console/hosts"},
		{"/console/x\r\nSet-Cookie: a=b", "/console/hosts"},
		{"/admin/stats", "/console/hosts"},
	} {
		r := httptest.NewRequest(http.MethodPost, "/console/hosts/h/pause", strings.NewReader(url.Values{"back": {c.back}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if err := r.ParseForm(); err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		back(w, r, "/console/hosts")
		if got := w.Header().Get("Location"); got != c.want {
			t.Errorf("back %q: Location %q, want %q", c.back, got, c.want)
		}
	}
}

func TestChartScalesToTheLargest(t *testing.T) {
	t.Parallel()
	ch := newChart([]int64{0, 1, 100, 50}, "delivered")
	if ch.Width != 4*barWidth || ch.Max != 100 || len(ch.Bars) != 4 {
		t.Fatalf("chart %+v", ch)
	}
	if h := ch.Bars[2].H; h != chartHeight-2 {
		t.Errorf("largest bar %d high, want %d", h, chartHeight-2)
	}
	if ch.Bars[0].H != 0 || ch.Bars[1].H != 1 || ch.Bars[3].H != (chartHeight-2)/2 {
		t.Errorf("bars %+v", ch.Bars)
	}
	for _, b := range ch.Bars {
		if b.Y+b.H != chartHeight {
			t.Errorf("bar %+v does not stand on the baseline", b)
		}
	}
	if empty := newChart(make([]int64, 60), "failed"); empty.Max != 0 || empty.Bars[59].H != 0 {
		t.Errorf("empty chart %+v", empty.Bars[59])
	}
}

func TestAgo(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, "-"},
		{now.Add(-5 * time.Second), "5s ago"},
		{now.Add(-3 * time.Minute), "3m ago"},
		{now.Add(-5 * time.Hour), "5h ago"},
		{now.Add(-72 * time.Hour), "3d ago"},
		{now.Add(90 * time.Second), "in 1m"},
	} {
		if got := ago(now, c.t); got != c.want {
			t.Errorf("ago(%v) = %q, want %q", c.t, got, c.want)
		}
	}
}

func TestNewNeedsTheAdminAPI(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "Admin is required") {
		t.Fatalf("New without Admin: %v", err)
	}
}

// Sessions end on sign-out, after the idle time without use, after the
// maximum time however used, and the least recently used goes when the
// bound is reached; ids are random and the token is not in them.
func TestSessionsExpireAndEnd(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := func() time.Time { return now }
	s := newSessions(clock, time.Hour, 3*time.Hour, 3)
	const token = "the-admin-token-the-admin-token-the-admin-token"
	a, err := s.create(token)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.create(token)
	if a == b || strings.Contains(a, token) || len(a) < 40 {
		t.Fatalf("ids %q and %q", a, b)
	}
	sa, ok := s.get(a)
	sb, _ := s.get(b)
	if !ok || sa.token != token || len(sa.csrf) != 64 || sa.csrf == sb.csrf {
		t.Fatalf("session a %+v, b %+v", sa, sb)
	}
	// Used every 50 minutes, a stays; b, unused for an hour, ends.
	now = now.Add(50 * time.Minute)
	if _, ok := s.get(a); !ok {
		t.Fatal("a ended within its idle time")
	}
	now = now.Add(50 * time.Minute)
	if _, ok := s.get(a); !ok {
		t.Fatal("a, used 50 minutes ago, ended")
	}
	if _, ok := s.get(b); ok {
		t.Fatal("b, unused for 100 minutes, still works")
	}
	// However used, a ends 3 hours after sign-in.
	for i := 0; i < 4; i++ {
		now = now.Add(20 * time.Minute)
		s.get(a)
	}
	if _, ok := s.get(a); ok {
		t.Fatal("a still works 3 hours after sign-in")
	}
	// Sign-out ends at once.
	c, _ := s.create(token)
	s.end(c)
	if _, ok := s.get(c); ok {
		t.Fatal("a session still works after sign-out")
	}
	// The bound: the least recently used goes.
	ids := make([]string, 4)
	for i := range ids {
		now = now.Add(time.Minute)
		ids[i], _ = s.create(token)
		if i == 1 {
			now = now.Add(time.Minute)
			s.get(ids[0])
		}
	}
	if n := s.len(); n != 3 {
		t.Fatalf("%d sessions kept, want 3", n)
	}
	if _, ok := s.get(ids[1]); ok {
		t.Error("the least recently used session was kept past the bound")
	}
	for _, i := range []int{0, 2, 3} {
		if _, ok := s.get(ids[i]); !ok {
			t.Errorf("session %d ended", i)
		}
	}
	if _, ok := s.get(""); ok {
		t.Error("an empty id is a session")
	}
}
