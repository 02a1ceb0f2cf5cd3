package main

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// chromium returns the path of a headless-capable Chromium (Debian's
// chromium package). Without one the browser tests skip, unless
// COURIER_BROWSER_TESTS is set (CI sets it), where they fail.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("COURIER_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("COURIER_BROWSER_TESTS") != "" {
		t.Fatal("COURIER_BROWSER_TESTS is set but no chromium was found (apt-get install chromium)")
	}
	t.Skip("no chromium: the browser tests need Debian's chromium package")
	return ""
}

// newBrowser starts a headless Chromium with a fresh profile and returns a
// context that drives one tab of it.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), // a small /dev/shm in containers
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	// Bounds the whole browser session; each step below waits on a
	// condition, never a fixed delay.
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// shots saves a screenshot of each page to COURIER_CONSOLE_SCREENSHOTS
// (the README's pictures) or a temporary directory.
type shots struct {
	t   *testing.T
	dir string
}

func newShots(t *testing.T) *shots {
	dir := os.Getenv("COURIER_CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &shots{t: t, dir: dir}
}

func (s *shots) take(ctx context.Context, name string) {
	s.t.Helper()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		s.t.Fatalf("screenshot %s: %v", name, err)
	}
	img, err := png.Decode(bytes.NewReader(buf))
	if err != nil {
		s.t.Fatalf("screenshot %s is not a PNG: %v", name, err)
	}
	if b := img.Bounds(); b.Dx() < 600 || b.Dy() < 200 {
		s.t.Fatalf("screenshot %s is %v", name, b)
	}
	if err := os.WriteFile(filepath.Join(s.dir, name+".png"), buf, 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// browse runs browser actions, failing the test on error.
func browse(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
		t.Fatalf("%s: %v\npage:\n%s", what, err, html)
	}
}

// stepTimeout bounds one browser step (a page load and the waits on it).
const stepTimeout = 30 * time.Second

// take runs one browser action that returns a value.
func take[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// textOf returns the text of the first node matching the CSS selector.
func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return take(t, ctx, "read "+sel, chromedp.Text(chromedp.CSS(sel)))
}

// css and id are the selectors of the steps below.
func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }
func id(sel string) chromedp.ID   { return chromedp.ID(sel) }

// postFromPage has the browser POST form to path as a form of the page
// would (the page's script is off by its Content-Security-Policy, so the
// form is built through the DevTools protocol), and returns the text of the
// answer page's message.
func postFromPage(t *testing.T, ctx context.Context, ops, path string, form map[string]string) string {
	t.Helper()
	browse(t, ctx, "a page to post from", chromedp.Navigate(ops+"/console/activity"), chromedp.WaitVisible(css("main h1")))
	var fields []string
	for k, v := range form {
		fields = append(fields, fmt.Sprintf("i = document.createElement('input'); i.type = 'hidden'; i.name = %q; i.value = %q; f.appendChild(i);", k, v))
	}
	js := fmt.Sprintf(`(() => { const f = document.createElement('form'); f.method = 'post'; f.action = %q; let i; %s document.body.appendChild(f); f.submit(); return true; })()`,
		path, strings.Join(fields, " "))
	take(t, ctx, "POST "+path, chromedp.Evaluate[bool](js))
	browse(t, ctx, "the answer to POST "+path, chromedp.WaitVisible(css("main p.error")))
	return textOf(t, ctx, "main p.error")
}

// TestConsoleInBrowser drives the console in a real headless Chromium: it
// signs in, sees a dead-lettered delivery, retries it and sees it delivered
// to a real loopback inbox that verifies its signature; pauses and resumes
// the host; adds a relay, sees it accepted by a real loopback relay and
// removes it after a confirmation; and is refused a change without the
// CSRF token and without the session cookie. It saves a screenshot of
// each page.
func TestConsoleInBrowser(t *testing.T) {
	ctx := newBrowser(t)
	rig := newConsoleRig(t)
	shot := newShots(t)
	host := hostOf(rig.remote.host.srv.URL)
	bg := context.Background()

	// The remote inbox refuses (400, permanent): the Accept of its Follow
	// is dead-lettered.
	rig.follow(t)
	waitFor(t, "the Accept dead-lettered", func() bool {
		st, err := rig.app.queue.Stats(bg)
		return err == nil && st["dead_lettered"]["delivery.post"] == 1
	})

	// Without a session, the console sends the browser to sign in.
	browse(t, ctx, "open the console", chromedp.Navigate(rig.ops+"/console/"), chromedp.WaitVisible(id("#token")))
	loc := take(t, ctx, "location", chromedp.Location())
	if !strings.HasSuffix(loc, "/console/login") {
		t.Fatalf("without a session the console showed %s", loc)
	}
	shot.take(ctx, "login")
	browse(t, ctx, "sign in", chromedp.SendKeys(id("#token"), consoleToken), chromedp.Submit(id("#token")),
		chromedp.WaitVisible(id("#dead-total")))
	if got := textOf(t, ctx, "#dead-total"); got != "1" {
		t.Fatalf("overview shows %q dead-lettered, want 1", got)
	}
	shot.take(ctx, "overview")

	// The dead letter, with its host and error.
	row := `#events tr[data-row]`
	browse(t, ctx, "dead letters", chromedp.Navigate(rig.ops+"/console/events?status=dead_lettered"), chromedp.WaitVisible(css(row)))
	if got := textOf(t, ctx, row); !strings.Contains(got, host) || !strings.Contains(got, "400") {
		t.Fatalf("dead-letter row %q names neither the host %s nor the 400", got, host)
	}
	shot.take(ctx, "dead-letters")
	detail := take(t, ctx, "event link", chromedp.AttributeValue(css(row+" a"), "href")).Value
	browse(t, ctx, "event detail", chromedp.Navigate(rig.ops+detail), chromedp.WaitVisible(css("pre")))
	shot.take(ctx, "event")

	// Retry all matching asks first, with the count.
	browse(t, ctx, "retry all", chromedp.Navigate(rig.ops+"/console/events?status=dead_lettered"), chromedp.WaitVisible(id("#retry-all")),
		chromedp.Click(id("#retry-all")), chromedp.WaitVisible(id("#question")))
	if q := textOf(t, ctx, "#question"); !strings.Contains(q, "Retry 1 dead_lettered") {
		t.Fatalf("confirmation asks %q", q)
	}
	shot.take(ctx, "confirm")

	// A POST without the CSRF token is refused and changes nothing.
	browse(t, ctx, "events", chromedp.Navigate(rig.ops+"/console/events?status=dead_lettered"), chromedp.WaitVisible(css(row)))
	csrf := take(t, ctx, "read the csrf token", chromedp.Value(css(row+` input[name="csrf"]`)))
	if msg := postFromPage(t, ctx, rig.ops, "/console/hosts/"+host+"/pause", map[string]string{"reason": "no csrf"}); !strings.Contains(msg, "CSRF") {
		t.Errorf("pause without the CSRF token answered %q", msg)
	}
	if msg := postFromPage(t, ctx, rig.ops, "/console/hosts/"+host+"/pause", map[string]string{"csrf": strings.Repeat("0", len(csrf))}); !strings.Contains(msg, "CSRF") {
		t.Errorf("pause with a wrong CSRF token answered %q", msg)
	}
	if h, err := rig.app.delivery.Health().Host(bg, host); err != nil || h.Paused {
		t.Fatalf("after refused pauses: %+v, %v", h, err)
	}

	// Retry it: the inbox now accepts, and the Accept arrives, signed.
	rig.remote.status.Store(202)
	browse(t, ctx, "retry", chromedp.Navigate(rig.ops+"/console/events?status=dead_lettered"), chromedp.WaitVisible(css(row)),
		chromedp.Click(css(row+" button.retry")), chromedp.WaitVisible(css(".flash")))
	if f := textOf(t, ctx, ".flash"); !strings.Contains(f, "retry") {
		t.Fatalf("after retry the page says %q", f)
	}
	waitFor(t, "the Accept delivered", func() bool { return len(rig.remote.received("Accept")) == 1 })
	if err := rig.remote.refusals(); err != nil {
		t.Fatalf("the inbox refused a signature: %v", err)
	}
	acceptID, _ := rig.remote.received("Accept")[0]["id"].(string)
	deadline := time.Now().Add(30 * time.Second)
	for {
		browse(t, ctx, "activity", chromedp.Navigate(rig.ops+"/console/activity?id="+acceptID), chromedp.WaitVisible(id("#inboxes")))
		if strings.Contains(textOf(t, ctx, "#inboxes tbody"), "delivered") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the activity page never showed the delivery delivered: %q", textOf(t, ctx, "#inboxes tbody"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	shot.take(ctx, "activity")

	// Pause and resume the host (its health is recorded in the
	// background).
	waitFor(t, "the host's health recorded", func() bool {
		_, err := rig.app.delivery.Health().Host(bg, host)
		return err == nil
	})
	hostRow := fmt.Sprintf(`#hosts tr[data-host=%q]`, host)
	browse(t, ctx, "hosts", chromedp.Navigate(rig.ops+"/console/hosts"), chromedp.WaitVisible(css(hostRow+" button.pause")),
		chromedp.Click(css(hostRow+" button.pause")), chromedp.WaitVisible(css(hostRow+" .tag.paused")))
	if h, err := rig.app.delivery.Health().Host(bg, host); err != nil || !h.Paused {
		t.Fatalf("after pause: %+v, %v", h, err)
	}
	shot.take(ctx, "hosts")
	browse(t, ctx, "resume", chromedp.Click(css(hostRow+" button.resume")), chromedp.WaitVisible(css(hostRow+" button.pause")))
	if h, err := rig.app.delivery.Health().Host(bg, host); err != nil || h.Paused {
		t.Fatalf("after resume: %+v, %v", h, err)
	}

	// The other pages.
	browse(t, ctx, "block a domain", chromedp.Navigate(rig.ops+"/console/blocks"), chromedp.WaitVisible(css(`input[name="domain"]`)),
		chromedp.SendKeys(css(`input[name="domain"]`), "spam.example"),
		chromedp.SendKeys(css(`input[name="reason"]`), "unsolicited mentions"),
		chromedp.Submit(css(`input[name="domain"]`)), chromedp.WaitVisible(css(".flash")))
	if got := textOf(t, ctx, "#blocks tbody"); !strings.Contains(got, "spam.example") {
		t.Fatalf("blocks page shows %q", got)
	}
	shot.take(ctx, "blocks")

	// Add a relay: pending until the relay (on loopback, verifying the
	// instance actor's signature) accepts; remove it after a confirmation.
	relay := newRelayInbox(t, rig)
	relayURL := relay.host.srv.URL + "/inbox"
	relayRow := fmt.Sprintf(`#relays tr[data-relay=%q]`, relayURL)
	browse(t, ctx, "add a relay", chromedp.Navigate(rig.ops+"/console/relays"), chromedp.WaitVisible(id("#relay-url")),
		chromedp.SendKeys(id("#relay-url"), relayURL), chromedp.Submit(id("#relay-url")), chromedp.WaitVisible(css(".flash")))
	if got := textOf(t, ctx, relayRow); !strings.Contains(got, "mastodon") || !strings.Contains(got, "pending") {
		t.Fatalf("relay row after add: %q", got)
	}
	rig.acceptRelay(t, relay)
	if err := relay.refusals(); err != nil {
		t.Fatalf("the relay refused a signature: %v", err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		browse(t, ctx, "relays", chromedp.Navigate(rig.ops+"/console/relays"), chromedp.WaitVisible(css(relayRow)))
		if strings.Contains(textOf(t, ctx, relayRow), "accepted") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relays page never showed the relay accepted: %q", textOf(t, ctx, relayRow))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := textOf(t, ctx, relayRow); !strings.Contains(got, relay.host.actorID()) {
		t.Fatalf("accepted relay row %q does not name its actor %s", got, relay.host.actorID())
	}
	shot.take(ctx, "relays")
	browse(t, ctx, "remove the relay", chromedp.Click(css(relayRow+" button.danger")), chromedp.WaitVisible(id("#question")))
	if q := textOf(t, ctx, "#question"); !strings.Contains(q, "Remove relay "+relayURL) {
		t.Fatalf("confirmation asks %q", q)
	}
	if rs, err := rig.app.store.Relays(bg); err != nil || len(rs) != 1 {
		t.Fatalf("the question removed the relay: %+v, %v", rs, err)
	}
	browse(t, ctx, "confirm the removal", chromedp.Click(id("#confirm")), chromedp.WaitVisible(css(".flash")))
	if got := textOf(t, ctx, "#relays tbody"); strings.Contains(got, relayURL) {
		t.Fatalf("relays page after the removal shows %q", got)
	}
	waitFor(t, "the relay's Undo", func() bool { return len(relay.received("Undo")) == 1 })
	browse(t, ctx, "jetstream", chromedp.Navigate(rig.ops+"/console/jetstream"), chromedp.WaitVisible(css("h1")))
	shot.take(ctx, "jetstream")
	browse(t, ctx, "overview again", chromedp.Navigate(rig.ops+"/console/"), chromedp.WaitVisible(css("svg.chart")))
	shot.take(ctx, "overview")

	// Without the session cookie, a change with the right CSRF token is
	// refused, and pages send the browser to sign in.
	browse(t, ctx, "clear cookies", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.ClearBrowserCookies, cdp.Empty{})
		return err
	}))
	if msg := postFromPage(t, ctx, rig.ops, "/console/hosts/"+host+"/pause", map[string]string{"csrf": csrf}); !strings.Contains(msg, "not signed in") {
		t.Errorf("pause without the cookie answered %q", msg)
	}
	if h, err := rig.app.delivery.Health().Host(bg, host); err != nil || h.Paused {
		t.Fatalf("after a pause without the cookie: %+v, %v", h, err)
	}
	browse(t, ctx, "signed out", chromedp.Navigate(rig.ops+"/console/hosts"), chromedp.WaitVisible(id("#token")))
	loc = take(t, ctx, "location", chromedp.Location())
	if !strings.HasSuffix(loc, "/console/login") {
		t.Fatalf("without the cookie the hosts page showed %s", loc)
	}
}
