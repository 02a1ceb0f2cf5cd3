package server

import (
	"bytes"
	"html"
	"html/template"
	"net/http"
	"strings"

	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/store"
)

// The HTML pages are for people following a link in a browser: a readable
// profile and note, no scripts, no remote resources. Every value is
// escaped by html/template; note content (HTML written by clients and
// peers) is shown as plain text.
var pages = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<link rel="alternate" type="application/activity+json" href="{{.Alternate}}">
<style>
body{font-family:system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem;line-height:1.5;color:#222}
article{border-top:1px solid #ddd;padding:.75rem 0}
.meta{color:#666;font-size:.9rem}
.text{white-space:pre-wrap;overflow-wrap:anywhere}
</style>
</head>
<body>
{{with .Profile}}
<header>
<h1>{{.DisplayName}}</h1>
<p class="meta">@{{.Name}}@{{.Host}}</p>
{{if .Summary}}<p class="text">{{.Summary}}</p>{{end}}
</header>
{{range .Notes}}
<article>
{{if .Summary}}<p><strong>{{.Summary}}</strong></p>{{end}}
<p class="text">{{.Text}}</p>
<p class="meta"><a href="{{.URL}}">{{.Published}}</a></p>
</article>
{{else}}
<p class="meta">No public notes yet.</p>
{{end}}
{{end}}
{{with .Gone}}
<p>This {{.}} was deleted.</p>
{{end}}
{{with .Note}}
<article>
<p class="meta"><a href="{{.AuthorURL}}">{{.AuthorName}}</a> @{{.AuthorHandle}}</p>
{{if .Summary}}<p><strong>{{.Summary}}</strong></p>{{end}}
<p class="text">{{.Text}}</p>
<p class="meta">{{.Published}}{{if .Updated}} (edited {{.Updated}}){{end}} · {{.Likes}} likes · {{.Shares}} shares{{range .Emoji}} · {{.Emoji}} {{.Count}}{{end}}</p>
</article>
{{end}}
</body>
</html>
`))

type pageData struct {
	Title     string
	Alternate string
	Profile   *profileData
	Note      *noteData
	// Gone names the type of a deleted object.
	Gone string
}

type profileData struct {
	DisplayName, Name, Host, Summary string
	Notes                            []noteData
}

type noteData struct {
	URL, Summary, Text, Published, Updated string
	AuthorURL, AuthorName, AuthorHandle    string
	Likes, Shares                          int
	Emoji                                  []emojiLine
}

func displayName(a *store.Actor) string {
	if a.DisplayName != "" {
		return a.DisplayName
	}
	return a.Name
}

func noteView(o *store.Object) noteData {
	n := noteData{URL: o.URI, Summary: o.Summary, Text: plainText(o.Content), Published: o.Published.Format("2006-01-02 15:04 MST")}
	if !o.Updated.IsZero() {
		n.Updated = o.Updated.Format("2006-01-02 15:04 MST")
	}
	return n
}

func profilePage(u store.URIs, a *store.Actor, notes []*store.Object) pageData {
	p := &profileData{DisplayName: displayName(a), Name: a.Name, Host: u.Host(), Summary: plainText(a.Summary)}
	for _, o := range notes {
		p.Notes = append(p.Notes, noteView(o))
	}
	return pageData{Title: displayName(a) + " (@" + a.Name + "@" + u.Host() + ")", Alternate: a.URI, Profile: p}
}

func notePage(u store.URIs, a *store.Actor, o *store.Object, likes, shares int) pageData {
	n := noteView(o)
	n.AuthorURL, n.AuthorName, n.AuthorHandle = a.URI, displayName(a), a.Name+"@"+u.Host()
	n.Likes, n.Shares = likes, shares
	title := displayName(a) + ": " + truncate(n.Text, 60)
	return pageData{Title: title, Alternate: o.URI, Note: &n}
}

func gonePage(o *store.Object) pageData {
	t := strings.ToLower(o.FormerType)
	if t == "" {
		t = "note"
	}
	return pageData{Title: "Deleted", Alternate: o.URI, Gone: t}
}

func (s *Server) renderHTML(w http.ResponseWriter, r *http.Request, d pageData) {
	s.renderHTMLStatus(w, r, http.StatusOK, d)
}

func (s *Server) renderHTMLStatus(w http.ResponseWriter, r *http.Request, status int, d pageData) {
	var buf bytes.Buffer
	if err := pages.Execute(&buf, d); err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	w.Header().Add("Vary", "Accept")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	httpedge.WriteRaw(w, status, "text/html; charset=utf-8", buf.Bytes())
}

// plainText turns note HTML into text: line-breaking tags become newlines,
// other tags are dropped, entities decoded. The result is escaped again
// when rendered.
func plainText(h string) string {
	var b strings.Builder
	for len(h) > 0 {
		i := strings.IndexByte(h, '<')
		if i < 0 {
			b.WriteString(h)
			break
		}
		b.WriteString(h[:i])
		j := strings.IndexByte(h[i:], '>')
		if j < 0 {
			break // an unclosed tag: drop the rest
		}
		tag := strings.ToLower(strings.Trim(h[i+1:i+j], "/ "))
		if name, _, _ := strings.Cut(tag, " "); name == "br" || name == "p" {
			if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
				b.WriteString("\n")
			}
		}
		h = h[i+j+1:]
	}
	return strings.TrimSpace(html.UnescapeString(b.String()))
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
