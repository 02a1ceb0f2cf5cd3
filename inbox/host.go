package inbox

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// ErrWrongHost: the request is addressed to another server: its Host (the
// authority of an absolute request target included) is not the one of
// courier's base URL. A server that received a signed delivery could
// otherwise replay it here within the Date window: the signature covers
// Host and the request target, so requiring them to be courier's own
// makes a signature made for another server worthless here.
var ErrWrongHost = errors.New("inbox: request is addressed to another host")

// authority returns host:port of base, lower case, with the scheme's
// default port filled in, and the scheme.
func authority(base string) (string, string, error) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return "", "", fmt.Errorf("inbox: base URL %q has no host", base)
	}
	return normalAuthority(u.Host, u.Scheme), u.Scheme, nil
}

// normalAuthority lower-cases hostport, drops a trailing dot of the name,
// and adds the default port of scheme when there is none.
func normalAuthority(hostport, scheme string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if port == "" {
		port = "80"
		if scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(host, port)
}

// checkHost refuses r unless its Host, and the authority of an absolute-form
// request target, are courier's own. The signed (request-target) is then
// checked against the path r was routed by, so a request that passes
// both was made for this server and this inbox.
func (h *Handler) checkHost(r *http.Request) error {
	if got := normalAuthority(r.Host, h.scheme); got != h.authority {
		return fmt.Errorf("%w: Host %q, this server is %s", ErrWrongHost, r.Host, h.cfg.Store.URIs().Base)
	}
	if uri := r.RequestURI; uri != "" && !strings.HasPrefix(uri, "/") {
		u, err := url.Parse(uri)
		if err != nil || normalAuthority(u.Host, h.scheme) != h.authority {
			return fmt.Errorf("%w: request target %q, this server is %s", ErrWrongHost, uri, h.cfg.Store.URIs().Base)
		}
	}
	return nil
}
