package activitypub

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// WebFinger and NodeInfo constants.
const (
	// JRDContentType is the WebFinger response media type.
	JRDContentType = "application/jrd+json"
	// XRDContentType is the host-meta response media type.
	XRDContentType = "application/xrd+xml"
	// ProfilePageRel is the WebFinger rel of an actor's HTML profile page.
	ProfilePageRel = "http://webfinger.net/rel/profile-page"
	// NodeInfoSchema21 is the NodeInfo 2.1 schema URI (the discovery rel).
	NodeInfoSchema21 = "http://nodeinfo.diaspora.software/ns/schema/2.1"
	// NodeInfoContentType is the NodeInfo 2.1 document media type.
	NodeInfoContentType = `application/json; profile="http://nodeinfo.diaspora.software/ns/schema/2.1#"`
	// SoftwareName is courier's NodeInfo software name.
	SoftwareName = "courier"
)

// ErrBadResource is returned (wrapped) for a WebFinger resource courier
// cannot interpret.
var ErrBadResource = errors.New("activitypub: bad webfinger resource")

// JRD is a WebFinger JSON Resource Descriptor (RFC 7033).
type JRD struct {
	Subject string   `json:"subject"`
	Aliases []string `json:"aliases,omitempty"`
	Links   []Link   `json:"links"`
}

// Link is a JRD link.
type Link struct {
	Rel      string `json:"rel"`
	Type     string `json:"type,omitempty"`
	Href     string `json:"href,omitempty"`
	Template string `json:"template,omitempty"`
}

// NewWebFinger builds the JRD of a local actor: subject acct:user@host,
// the actor id (and profile page, when different) as aliases, a self link
// of type application/activity+json and, when profileURL is set, a
// profile-page link.
func NewWebFinger(user, host, actorID, profileURL string) JRD {
	j := JRD{
		Subject: "acct:" + user + "@" + host,
		Aliases: []string{actorID},
		Links:   []Link{{Rel: "self", Type: ContentType, Href: actorID}},
	}
	if profileURL != "" {
		if profileURL != actorID {
			j.Aliases = append(j.Aliases, profileURL)
		}
		j.Links = append(j.Links, Link{Rel: ProfilePageRel, Type: "text/html", Href: profileURL})
	}
	return j
}

// Self returns the href of the JRD's ActivityPub self link.
func (j JRD) Self() string {
	for _, l := range j.Links {
		if l.Rel == "self" && (IsActivityPubContentType(l.Type) || l.Type == "") && l.Href != "" {
			return l.Href
		}
	}
	return ""
}

// maxResource bounds a WebFinger resource parameter.
const maxResource = 1024

// ParseWebFingerResource interprets a WebFinger resource: "acct:user@host",
// "user@host" (optionally with a leading "@"), or an actor URL of the forms
// https://host/users/user and https://host/@user. The host is returned in
// lower case with its port, if any. Errors wrap ErrBadResource.
func ParseWebFingerResource(res string) (user, host string, err error) {
	res = strings.TrimSpace(res)
	if res == "" || len(res) > maxResource {
		return "", "", fmt.Errorf("%w: empty or too long", ErrBadResource)
	}
	if strings.HasPrefix(res, "https://") || strings.HasPrefix(res, "http://") {
		u, err := url.Parse(res)
		if err != nil || u.Host == "" || u.User != nil {
			return "", "", fmt.Errorf("%w: %q", ErrBadResource, res)
		}
		p := strings.TrimSuffix(u.Path, "/")
		switch {
		case strings.HasPrefix(p, "/users/"):
			user = strings.TrimPrefix(p, "/users/")
		case strings.HasPrefix(p, "/@"):
			user = strings.TrimPrefix(p, "/@")
		default:
			return "", "", fmt.Errorf("%w: not an actor URL: %q", ErrBadResource, res)
		}
		host = u.Host
	} else {
		s := res
		if len(s) >= 5 && strings.EqualFold(s[:5], "acct:") {
			s = s[5:]
		}
		s = strings.TrimPrefix(s, "@")
		if d, err := url.PathUnescape(s); err == nil {
			s = d
		}
		i := strings.LastIndexByte(s, '@')
		if i <= 0 {
			return "", "", fmt.Errorf("%w: %q", ErrBadResource, res)
		}
		user, host = s[:i], s[i+1:]
	}
	if !validUser(user) {
		return "", "", fmt.Errorf("%w: bad user in %q", ErrBadResource, res)
	}
	host = strings.ToLower(host)
	if !validHost(host) {
		return "", "", fmt.Errorf("%w: bad host in %q", ErrBadResource, res)
	}
	return user, host, nil
}

func validUser(u string) bool {
	if u == "" || len(u) > 256 {
		return false
	}
	for _, c := range u {
		if c == '/' || c == '@' || c == '?' || c == '#' || c == ':' || c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

func validHost(h string) bool {
	if h == "" || len(h) > 255 {
		return false
	}
	u, err := url.Parse("https://" + h)
	if err != nil || u.Host != h || u.Path != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	return u.Hostname() != ""
}

// HostMeta returns the host-meta XRD document pointing at baseURL's
// WebFinger endpoint (an LRDD template), for servers that look it up first.
func HostMeta(baseURL string) []byte {
	var tmpl bytes.Buffer
	_ = xml.EscapeText(&tmpl, []byte(strings.TrimRight(baseURL, "/")+"/.well-known/webfinger?resource={uri}"))
	return []byte(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<XRD xmlns="http://docs.oasis-open.org/ns/xri/xrd-1.0">` + "\n" +
		`  <Link rel="lrdd" type="application/jrd+json" template="` + tmpl.String() + `"/>` + "\n" +
		`</XRD>` + "\n")
}

// NodeInfoLinks is the /.well-known/nodeinfo discovery document.
type NodeInfoLinks struct {
	Links []Link `json:"links"`
}

// NewNodeInfoLinks returns the discovery document pointing at
// {baseURL}/nodeinfo/2.1.
func NewNodeInfoLinks(baseURL string) NodeInfoLinks {
	return NodeInfoLinks{Links: []Link{{Rel: NodeInfoSchema21, Href: strings.TrimRight(baseURL, "/") + "/nodeinfo/2.1"}}}
}

// NodeInfo is a NodeInfo 2.0/2.1 document.
type NodeInfo struct {
	Version           string           `json:"version"`
	Software          NodeInfoSoftware `json:"software"`
	Protocols         []string         `json:"protocols"`
	Services          NodeInfoServices `json:"services"`
	OpenRegistrations bool             `json:"openRegistrations"`
	Usage             NodeInfoUsage    `json:"usage"`
	Metadata          map[string]any   `json:"metadata"`
}

// NodeInfoSoftware names the server software.
type NodeInfoSoftware struct {
	Name       string `json:"name"`
	Version    string `json:"version"`
	Repository string `json:"repository,omitempty"`
	Homepage   string `json:"homepage,omitempty"`
}

// NodeInfoServices lists third-party services the server bridges to.
type NodeInfoServices struct {
	Inbound  []string `json:"inbound"`
	Outbound []string `json:"outbound"`
}

// NodeInfoUsage holds the usage statistics.
type NodeInfoUsage struct {
	Users         NodeInfoUsers `json:"users"`
	LocalPosts    int64         `json:"localPosts"`
	LocalComments int64         `json:"localComments,omitempty"`
}

// NodeInfoUsers counts users.
type NodeInfoUsers struct {
	Total          int64 `json:"total"`
	ActiveHalfyear int64 `json:"activeHalfyear"`
	ActiveMonth    int64 `json:"activeMonth"`
}

// NewNodeInfo builds courier's NodeInfo 2.1 document.
func NewNodeInfo(version string, users NodeInfoUsers, localPosts int64) NodeInfo {
	return NodeInfo{
		Version:   "2.1",
		Software:  NodeInfoSoftware{Name: SoftwareName, Version: version, Repository: "https://github.com/courier-ap/courier"},
		Protocols: []string{"activitypub"},
		Services:  NodeInfoServices{Inbound: []string{}, Outbound: []string{}},
		Usage:     NodeInfoUsage{Users: users, LocalPosts: localPosts},
		Metadata:  map[string]any{},
	}
}

// ParseNodeInfo decodes a remote NodeInfo document. It requires a version
// and a software name; errors wrap ErrMalformed.
func ParseNodeInfo(data []byte) (*NodeInfo, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, fmt.Errorf("%w: nodeinfo is not a JSON object", ErrMalformed)
	}
	var w struct {
		Version  json.RawMessage `json:"version"`
		Software struct {
			Name       json.RawMessage `json:"name"`
			Version    json.RawMessage `json:"version"`
			Repository json.RawMessage `json:"repository"`
			Homepage   json.RawMessage `json:"homepage"`
		} `json:"software"`
		Protocols         json.RawMessage `json:"protocols"`
		OpenRegistrations json.RawMessage `json:"openRegistrations"`
		Usage             struct {
			Users struct {
				Total          json.RawMessage `json:"total"`
				ActiveHalfyear json.RawMessage `json:"activeHalfyear"`
				ActiveMonth    json.RawMessage `json:"activeMonth"`
			} `json:"users"`
			LocalPosts    json.RawMessage `json:"localPosts"`
			LocalComments json.RawMessage `json:"localComments"`
		} `json:"usage"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: nodeinfo: %v", ErrMalformed, err)
	}
	n := &NodeInfo{
		Version: firstString(w.Version),
		Software: NodeInfoSoftware{
			Name:       strings.ToLower(firstString(w.Software.Name)),
			Version:    firstString(w.Software.Version),
			Repository: firstString(w.Software.Repository),
			Homepage:   firstString(w.Software.Homepage),
		},
		Usage: NodeInfoUsage{
			Users: NodeInfoUsers{
				Total:          number(w.Usage.Users.Total),
				ActiveHalfyear: number(w.Usage.Users.ActiveHalfyear),
				ActiveMonth:    number(w.Usage.Users.ActiveMonth),
			},
			LocalPosts:    number(w.Usage.LocalPosts),
			LocalComments: number(w.Usage.LocalComments),
		},
	}
	// NodeInfo 1.x lists protocols as {"inbound": [...], "outbound": [...]}.
	var protos []string
	if json.Unmarshal(w.Protocols, &protos) == nil {
		n.Protocols = protos
	} else {
		var old struct {
			Inbound, Outbound []string
		}
		if json.Unmarshal(w.Protocols, &old) == nil {
			n.Protocols = old.Outbound
		}
	}
	_ = json.Unmarshal(w.OpenRegistrations, &n.OpenRegistrations)
	var md map[string]any
	if json.Unmarshal(w.Metadata, &md) == nil {
		n.Metadata = md
	}
	switch {
	case n.Version == "":
		return nil, &MissingFieldError{Field: "version"}
	case n.Software.Name == "":
		return nil, &MissingFieldError{Field: "software.name"}
	}
	return n, nil
}

// number reads a JSON number (or a numeric string) as a non-negative
// int64; 0 when absent or anything else.
func number(raw json.RawMessage) int64 {
	raw = bytes.Trim(bytes.TrimSpace(raw), `"`)
	var f float64
	if len(raw) == 0 || json.Unmarshal(raw, &f) != nil || f <= 0 || f >= 1<<62 {
		return 0
	}
	return int64(f)
}
