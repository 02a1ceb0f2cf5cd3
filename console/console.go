// Package console is the operator's web console: server-rendered pages
// (html/template, no script, no build step) over the admin API, served on
// the operators' listener under /console/.
//
// The console performs every read and every change through the admin API's
// own operations, in process: each page is one or more admin requests made
// with the operator's token, so the API's validation, bounds, logging and
// error codes are the console's too. An operator signs in with the admin
// token; the browser gets an HttpOnly, SameSite=Strict cookie scoped to
// /console/ holding a random session id, never the token. Sessions live in
// the server's memory (see sessions): they end on sign-out, after
// Config.SessionIdle without use or Config.SessionMax after sign-in, and
// when the process restarts. Every change is a POST carrying the session's
// own random CSRF token, every answer carries a strict
// Content-Security-Policy (no script at all, styles from the console's own
// stylesheet), and pages are never cached or framed.
package console

import (
	"bytes"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/mux"
)

// Prefix is where the console is mounted.
const Prefix = "/console/"

// Cookie names.
const (
	sessionCookie = "courier_console"
	flashCookie   = "courier_console_flash"
)

// csp is the Content-Security-Policy of every answer: nothing runs, styles
// come from the console's stylesheet, forms post only to the console.
const csp = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'"

// Bounds.
const (
	// maxFormBytes bounds a POST body.
	maxFormBytes = 16 << 10
	// maxAdminAnswer bounds an admin answer the console reads.
	maxAdminAnswer = 8 << 20
	// maxBulk bounds the events one "all matching" action changes.
	maxBulk = 10_000
	// pageLimit is the rows a list page shows.
	pageLimit = 100
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/console.css
var stylesheet []byte

// Config configures the console.
type Config struct {
	// Admin is the admin API (*admin.API), called in process. Required.
	Admin http.Handler
	// Enabled reports whether the admin API is on (a token configured);
	// when it is off the console answers 404 saying how to turn it on.
	// Default: on.
	Enabled bool
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives sign-in failures and internal errors. Nil discards.
	Logger *slog.Logger
	// SessionIdle ends a session unused for this long. Default
	// DefaultSessionIdle.
	SessionIdle time.Duration
	// SessionMax ends a session this long after sign-in. Default
	// DefaultSessionMax.
	SessionMax time.Duration
	// MaxSessions bounds the sessions kept at once. Default
	// DefaultMaxSessions.
	MaxSessions int
}

// Console is the web console. Create it with New and mount it with
// Register.
type Console struct {
	cfg      Config
	log      *slog.Logger
	sessions *sessions
	pages    map[string]*template.Template
	router   *mux.Router
}

// New validates cfg, parses the templates and returns the console.
func New(cfg Config) (*Console, error) {
	if cfg.Admin == nil {
		return nil, errors.New("console: config: Admin is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SessionIdle <= 0 {
		cfg.SessionIdle = DefaultSessionIdle
	}
	if cfg.SessionMax <= 0 {
		cfg.SessionMax = DefaultSessionMax
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	c := &Console{cfg: cfg, log: cfg.Logger,
		sessions: newSessions(cfg.Now, cfg.SessionIdle, cfg.SessionMax, cfg.MaxSessions)}
	if err := c.parse(); err != nil {
		return nil, err
	}
	c.router = c.routes()
	return c, nil
}

// Register mounts the console on r at /console and under /console/.
func (c *Console) Register(r *mux.Router) {
	r.Path("/console").Handler(http.RedirectHandler(Prefix, http.StatusSeeOther))
	r.PathPrefix(Prefix).Handler(c)
}

// ServeHTTP sets the security headers and answers one console request.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if !c.cfg.Enabled {
		http.Error(w, "the console is off: start the server with --admin-token or COURIER_ADMIN_TOKEN", http.StatusNotFound)
		return
	}
	c.router.ServeHTTP(w, r)
}

// session is one signed-in request: the session's id (the cookie's value),
// the admin token it calls the API with, and its CSRF token.
type session struct {
	id    string
	token string
	csrf  string
}

// sessionOf reads the session cookie. ok is false without a live session;
// stale is true when the browser sent a cookie naming none (signed out,
// expired, or from before a restart).
func (c *Console) sessionOf(r *http.Request) (s session, ok, stale bool) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil || ck.Value == "" {
		return session{}, false, false
	}
	s, ok = c.sessions.get(ck.Value)
	return s, ok, !ok
}

// handler is a console page or action; it returns an error to show.
type handler func(w http.ResponseWriter, r *http.Request, s session) error

// page wraps a GET handler: without a session it sends the browser to the
// sign-in page.
func (c *Console) page(fn handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok, stale := c.sessionOf(r)
		if !ok {
			to := Prefix + "login"
			if stale {
				clearCookie(w, r, sessionCookie)
				to += "?expired=1"
			}
			http.Redirect(w, r, to, http.StatusSeeOther)
			return
		}
		c.finish(w, r, s, fn(w, r, s))
	})
}

// action wraps a POST handler: it needs the session cookie and the
// session's CSRF token in the form, and a same-origin Origin when the
// browser sends one. Refusals change nothing.
func (c *Console) action(fn handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok, stale := c.sessionOf(r)
		if !ok {
			msg := "not signed in: sign in at " + Prefix + "login first"
			if stale {
				clearCookie(w, r, sessionCookie)
				msg = "your session ended (signed out, expired or the server restarted): sign in at " + Prefix + "login again"
			}
			c.refuse(w, r, http.StatusUnauthorized, msg)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r) {
			c.refuse(w, r, http.StatusForbidden, "cross-origin request refused")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			c.refuse(w, r, http.StatusBadRequest, "the form could not be read")
			return
		}
		got := r.PostForm.Get("csrf")
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) != 1 {
			c.refuse(w, r, http.StatusForbidden, "missing or wrong CSRF token: reload the page and try again")
			return
		}
		c.finish(w, r, s, fn(w, r, s))
	})
}

// sameOrigin reports whether the Origin header names the request's own
// host.
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// finish shows err, if any: a revoked or wrong token signs the browser out.
func (c *Console) finish(w http.ResponseWriter, r *http.Request, s session, err error) {
	if err == nil {
		return
	}
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
		c.sessions.end(s.id)
		clearCookie(w, r, sessionCookie)
		http.Redirect(w, r, Prefix+"login?expired=1", http.StatusSeeOther)
		return
	}
	status := http.StatusInternalServerError
	msg := "internal error (see the server log)"
	if errors.As(err, &ae) {
		status, msg = ae.Status, ae.Message
	} else {
		c.log.ErrorContext(r.Context(), "console: request failed", "path", r.URL.Path, "err", err)
	}
	c.render(w, r, status, "message", s, "Error", message{Title: "Error", Text: msg})
}

// refuse answers a request refused before any admin call.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	c.log.InfoContext(r.Context(), "console: request refused", "method", r.Method, "path", r.URL.Path,
		"status", status, "remote", r.RemoteAddr, "reason", msg)
	c.render(w, r, status, "message", session{}, "Refused", message{Title: "Refused", Text: msg})
}

// message is the data of the message page.
type message struct {
	Title, Text string
	Back        string
}

// apiError is an error answer of the admin API.
type apiError struct {
	Status  int
	Message string
	Code    string
	Fields  map[string]any
}

func (e *apiError) Error() string { return fmt.Sprintf("admin API %d: %s", e.Status, e.Message) }

// call makes one admin API request in process with the session's token and
// decodes its JSON answer into out (when not nil). An error answer is an
// *apiError.
func (c *Console) call(r *http.Request, s session, method, path string, q url.Values, body, out any) error {
	target := path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("console: encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(r.Context(), method, target, rd)
	if err != nil {
		return fmt.Errorf("console: %s %s: %w", method, path, err)
	}
	req.RemoteAddr = r.RemoteAddr
	req.Host = r.Host
	req.Header.Set("Authorization", "Bearer "+s.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	c.cfg.Admin.ServeHTTP(rec, req)
	if rec.overflow {
		return fmt.Errorf("console: %s %s: answer over %d bytes", method, path, maxAdminAnswer)
	}
	if rec.status >= 400 {
		ae := &apiError{Status: rec.status}
		var fields map[string]any
		if json.Unmarshal(rec.body.Bytes(), &fields) == nil {
			ae.Fields = fields
			ae.Message, _ = fields["error"].(string)
			ae.Code, _ = fields["code"].(string)
		}
		if ae.Message == "" {
			ae.Message = http.StatusText(rec.status)
		}
		return ae
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
		return fmt.Errorf("console: decode %s %s: %w", method, path, err)
	}
	return nil
}

// recorder is the in-process answer of one admin request, bounded.
type recorder struct {
	header   http.Header
	status   int
	wrote    bool
	body     bytes.Buffer
	overflow bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.wrote = true
	if r.body.Len()+len(p) > maxAdminAnswer {
		r.overflow = true
		return 0, errors.New("console: admin answer too large")
	}
	return r.body.Write(p)
}

// setCookie sets a console cookie: HttpOnly, SameSite=Strict, scoped to
// the console, Secure when the request came over TLS.
func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: Prefix, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

func clearCookie(w http.ResponseWriter, r *http.Request, name string) {
	setCookie(w, r, name, "", -1)
}

// flash leaves a one-line message for the next page the browser shows.
func flash(w http.ResponseWriter, r *http.Request, msg string) {
	setCookie(w, r, flashCookie, url.QueryEscape(msg), 60)
}

// takeFlash reads and clears the message left by the previous action.
func takeFlash(w http.ResponseWriter, r *http.Request) string {
	ck, err := r.Cookie(flashCookie)
	if err != nil || ck.Value == "" {
		return ""
	}
	clearCookie(w, r, flashCookie)
	msg, err := url.QueryUnescape(ck.Value)
	if err != nil {
		return ""
	}
	return msg
}

// view is what every page template gets.
type view struct {
	Title  string
	Nav    string
	CSRF   string
	Flash  string
	Signed bool
	Data   any
}

// render writes page name with status.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, s session, title string, data any) {
	t := c.pages[name]
	v := view{Title: title, Nav: name, CSRF: s.csrf, Signed: s.token != "", Data: data}
	if r.Method == http.MethodGet {
		v.Flash = takeFlash(w, r)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		c.log.ErrorContext(r.Context(), "console: render", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

var pageNames = []string{"login", "message", "overview", "events", "event", "confirm", "hosts", "activity",
	"jetstream", "blocks", "relays", "webhooks"}

func (c *Console) parse() error {
	funcs := template.FuncMap{
		"ago":   func(t time.Time) string { return ago(c.cfg.Now(), t) },
		"since": func(t time.Time) string { return ago(c.cfg.Now(), t) },
		"dur":   func(s int64) string { return (time.Duration(s) * time.Second).String() },
		"short": func(s string, n int) string {
			if len(s) <= n {
				return s
			}
			return s[:n] + "…"
		},
	}
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return fmt.Errorf("console: templates: %w", err)
	}
	c.pages = map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := base.Clone()
		if err != nil {
			return fmt.Errorf("console: templates: %w", err)
		}
		if _, err := t.ParseFS(templateFS, "templates/"+name+".html"); err != nil {
			return fmt.Errorf("console: templates: %w", err)
		}
		c.pages[name] = t
	}
	return nil
}

// ago says how long before now t was ("3m ago"), or "-" for a zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		s = fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// routes builds the console's router.
func (c *Console) routes() *mux.Router {
	r := mux.NewRouter()
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s, _, _ := c.sessionOf(req)
		c.render(w, req, http.StatusNotFound, "message", s, "Not found", message{Title: "Not found", Text: "no console page " + req.URL.Path})
	})
	get, post := http.MethodGet, http.MethodPost
	r.Handle(Prefix+"static/console.css", http.HandlerFunc(serveCSS)).Methods(get)
	r.Handle(Prefix+"login", http.HandlerFunc(c.loginPage)).Methods(get)
	r.Handle(Prefix+"login", http.HandlerFunc(c.login)).Methods(post)
	r.Handle(Prefix+"logout", c.action(c.logout)).Methods(post)
	r.Handle(Prefix, c.page(c.overview)).Methods(get)
	r.Handle(Prefix+"events", c.page(c.events)).Methods(get)
	r.Handle(Prefix+"events/bulk", c.action(c.bulk)).Methods(post)
	r.Handle(Prefix+"events/{id}", c.page(c.event)).Methods(get)
	r.Handle(Prefix+"events/{id}/{action:retry|discard}", c.action(c.eventAction)).Methods(post)
	r.Handle(Prefix+"hosts", c.page(c.hosts)).Methods(get)
	r.Handle(Prefix+"hosts/{host}/{action:pause|resume|retry|drain|reset}", c.action(c.hostAction)).Methods(post)
	r.Handle(Prefix+"activity", c.page(c.activity)).Methods(get)
	r.Handle(Prefix+"jetstream", c.page(c.jetstream)).Methods(get)
	r.Handle(Prefix+"jetstream/{id}/replay", c.action(c.replay)).Methods(post)
	r.Handle(Prefix+"blocks", c.page(c.blocks)).Methods(get)
	r.Handle(Prefix+"blocks", c.action(c.addBlock)).Methods(post)
	r.Handle(Prefix+"blocks/remove", c.action(c.removeBlock)).Methods(post)
	r.Handle(Prefix+"relays", c.page(c.relays)).Methods(get)
	r.Handle(Prefix+"relays", c.action(c.addRelay)).Methods(post)
	r.Handle(Prefix+"relays/remove", c.action(c.removeRelay)).Methods(post)
	r.Handle(Prefix+"webhooks", c.page(c.webhooks)).Methods(get)
	r.Handle(Prefix+"webhooks", c.action(c.addWebhook)).Methods(post)
	r.Handle(Prefix+"webhooks/{id:[0-9]+}/test", c.action(c.testWebhook)).Methods(post)
	r.Handle(Prefix+"webhooks/{id:[0-9]+}/rotate", c.action(c.rotateWebhook)).Methods(post)
	r.Handle(Prefix+"webhooks/{id:[0-9]+}/remove", c.action(c.removeWebhook)).Methods(post)
	return r
}

func serveCSS(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=3600")
	w.Write(stylesheet)
}

// loginPage shows the sign-in form.
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	msg := ""
	if r.URL.Query().Get("expired") != "" {
		msg = "Your session ended (signed out, expired, the server restarted or the admin token changed): sign in again."
	}
	c.render(w, r, http.StatusOK, "login", session{}, "Sign in", message{Text: msg})
}

// login checks the token with the admin API and, when it is right, starts
// a session whose id the cookie carries.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r) {
		c.refuse(w, r, http.StatusForbidden, "cross-origin request refused")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		c.refuse(w, r, http.StatusBadRequest, "the form could not be read")
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	if token == "" {
		c.render(w, r, http.StatusBadRequest, "login", session{}, "Sign in", message{Text: "Enter the admin token."})
		return
	}
	s := session{token: token}
	if err := c.call(r, s, http.MethodGet, "/admin/stats", nil, nil, nil); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			c.log.InfoContext(r.Context(), "console: sign-in refused: wrong token", "remote", r.RemoteAddr)
			c.render(w, r, http.StatusUnauthorized, "login", session{}, "Sign in", message{Text: "Wrong admin token."})
			return
		}
		c.finish(w, r, session{}, err)
		return
	}
	id, err := c.sessions.create(token)
	if err != nil {
		c.finish(w, r, session{}, fmt.Errorf("console: new session: %w", err))
		return
	}
	// A session cookie of the browser's (no Max-Age): it goes when the
	// browser closes, and the server ends it by SessionMax at the latest.
	setCookie(w, r, sessionCookie, id, 0)
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// logout ends the session on the server, so a copy of its cookie no longer
// signs anyone in, and clears the cookie.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, s session) error {
	c.sessions.end(s.id)
	clearCookie(w, r, sessionCookie)
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
	return nil
}

// back redirects to the page the form names (a console path only), or to
// fallback.
func back(w http.ResponseWriter, r *http.Request, fallback string) {
	to := r.PostForm.Get("back")
	if !strings.HasPrefix(to, Prefix) || strings.HasPrefix(to, "//") || strings.ContainsAny(to, "\\\r\n") {
		to = fallback
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}
