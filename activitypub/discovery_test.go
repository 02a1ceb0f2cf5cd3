package activitypub

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestWebFinger(t *testing.T) {
	t.Parallel()
	j := NewWebFinger("alice", "courier.example", "https://courier.example/users/alice", "https://courier.example/@alice")
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	var back JRD
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Subject != "acct:alice@courier.example" || back.Self() != "https://courier.example/users/alice" {
		t.Errorf("jrd = %s", b)
	}
	if len(back.Aliases) != 2 || len(back.Links) != 2 || back.Links[1].Rel != ProfilePageRel {
		t.Errorf("jrd = %s", b)
	}
	// The subject fingers back to the same user and host.
	if u, h, err := ParseWebFingerResource(back.Subject); err != nil || u != "alice" || h != "courier.example" {
		t.Errorf("subject does not parse back: %q %q %v", u, h, err)
	}
	if NewWebFinger("a", "h", "https://h/users/a", "").Links[0].Type != ContentType {
		t.Errorf("self link type")
	}
}

func TestParseWebFingerResource(t *testing.T) {
	t.Parallel()
	tests := []struct {
		res, user, host string
	}{
		{"acct:alice@courier.example", "alice", "courier.example"},
		{"ACCT:alice@Courier.Example", "alice", "courier.example"},
		{"alice@courier.example", "alice", "courier.example"},
		{"@alice@courier.example", "alice", "courier.example"},
		{"acct:alice@localhost:8080", "alice", "localhost:8080"},
		{"acct:alice%40courier.example", "alice", "courier.example"},
		{"  acct:alice@courier.example  ", "alice", "courier.example"},
		{"https://courier.example/users/alice", "alice", "courier.example"},
		{"http://localhost:8080/users/alice/", "alice", "localhost:8080"},
		{"https://courier.example/@alice", "alice", "courier.example"},
		{"acct:alice@[::1]:8080", "alice", "[::1]:8080"},
	}
	for _, tt := range tests {
		u, h, err := ParseWebFingerResource(tt.res)
		if err != nil || u != tt.user || h != tt.host {
			t.Errorf("ParseWebFingerResource(%q) = %q, %q, %v; want %q, %q", tt.res, u, h, err, tt.user, tt.host)
		}
	}
	for _, bad := range []string{
		"", "acct:", "alice", "acct:@host", "acct:alice@", "acct:alice@host/path", "acct:al/ice@host",
		"acct:alice@ho st", "https://courier.example/notes/1", "https://courier.example/users/a/b",
		"https://courier.example/", "mailto:alice@host", "acct:alice@host?x", "acct:alice@user@host/x",
		strings.Repeat("a", 2000) + "@host",
	} {
		if _, _, err := ParseWebFingerResource(bad); !errors.Is(err, ErrBadResource) {
			t.Errorf("ParseWebFingerResource(%q): got %v, want ErrBadResource", bad, err)
		}
	}
}

func TestHostMeta(t *testing.T) {
	t.Parallel()
	b := HostMeta("https://courier.example/")
	var doc struct {
		XMLName xml.Name `xml:"XRD"`
		Links   []struct {
			Rel      string `xml:"rel,attr"`
			Template string `xml:"template,attr"`
		} `xml:"Link"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("host-meta is not XML: %v\n%s", err, b)
	}
	if len(doc.Links) != 1 || doc.Links[0].Rel != "lrdd" || doc.Links[0].Template != "https://courier.example/.well-known/webfinger?resource={uri}" {
		t.Errorf("host-meta = %s", b)
	}
	// Characters special to XML are escaped.
	if err := xml.Unmarshal(HostMeta(`https://a.example/x?a=1&b="2"`), &doc); err != nil {
		t.Errorf("escaping: %v", err)
	}
}

func TestNodeInfo(t *testing.T) {
	t.Parallel()
	links := NewNodeInfoLinks("https://courier.example/")
	if len(links.Links) != 1 || links.Links[0].Rel != NodeInfoSchema21 || links.Links[0].Href != "https://courier.example/nodeinfo/2.1" {
		t.Errorf("links = %+v", links)
	}
	doc := NewNodeInfo("1.2.3", NodeInfoUsers{Total: 3, ActiveMonth: 2, ActiveHalfyear: 3}, 42)
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"version":"2.1"`, `"name":"courier"`, `"protocols":["activitypub"]`, `"openRegistrations":false`, `"localPosts":42`, `"inbound":[]`, `"metadata":{}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("nodeinfo lacks %s: %s", want, b)
		}
	}
	back, err := ParseNodeInfo(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Software.Name != SoftwareName || back.Software.Version != "1.2.3" || back.Usage.Users.Total != 3 || back.Usage.LocalPosts != 42 || back.Protocols[0] != "activitypub" {
		t.Errorf("round trip = %+v", back)
	}
}

func TestParseNodeInfoPeers(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("testdata/nodeinfo/*.json")
	if len(files) == 0 {
		t.Fatal("no nodeinfo fixtures")
	}
	for _, f := range files {
		n, err := ParseNodeInfo(readTestdata(t, strings.TrimPrefix(f, "testdata/")))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		want := strings.TrimSuffix(filepath.Base(f), ".json")
		if !strings.HasPrefix(want, n.Software.Name) {
			t.Errorf("%s: software %q", f, n.Software.Name)
		}
	}
	for _, bad := range []string{``, `[]`, `{}`, `{"version":"2.0"}`, `{"version":"2.0","software":{"name":""}}`, `{"version":`} {
		if _, err := ParseNodeInfo([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: got %v, want ErrMalformed", bad, err)
		}
	}
	// Odd usage values are tolerated as zero.
	n, err := ParseNodeInfo([]byte(`{"version":"2.0","software":{"name":"X","version":null},"protocols":{"inbound":[],"outbound":["activitypub"]},"usage":{"users":{"total":"12"},"localPosts":-4}}`))
	if err != nil || n.Software.Name != "x" || n.Usage.Users.Total != 12 || n.Usage.LocalPosts != 0 || n.Protocols[0] != "activitypub" {
		t.Errorf("tolerant: %+v %v", n, err)
	}
}
