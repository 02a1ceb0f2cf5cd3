package main

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"
)

// opsHosts is the Host check of the operators' listener. A page on any site
// the operator visits can have its name resolve to the operators' address
// (DNS rebinding) and then read /metrics, /readyz or the console as if it
// were served from there: the browser sends that site's name as Host. The
// listener therefore answers only Hosts that name it:
//
//   - localhost (and names under .localhost, which resolve to loopback);
//   - a loopback address;
//   - the host of --ops-listen, as written (a name or an address);
//   - when --ops-listen binds every interface (0.0.0.0, ::, or no host), an
//     address of one of this machine's interfaces;
//   - the names in --ops-hosts (COURIER_OPS_HOSTS): the names scrapers and
//     operators use, such as a compose service's name.
//
// Any other Host is answered 421 Misdirected Request with the JSON error
// body, before any route runs, and logged (at most a line a minute) so that
// an operator whose scraper uses a name not listed sees why.
type opsHosts struct {
	log        *slog.Logger
	lastLogged atomic.Int64 // unix nanoseconds
	names      map[string]bool
	addrs      map[netip.Addr]bool
	// anyLocal: the listener binds every interface, so each interface
	// address names it.
	anyLocal bool
}

// newOpsHosts builds the check for the listen address listen and the extra
// names extra (comma-separated).
func newOpsHosts(listen, extra string, logger *slog.Logger) *opsHosts {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &opsHosts{log: logger, names: map[string]bool{"localhost": true}, addrs: map[netip.Addr]bool{}}
	host, _, _ := net.SplitHostPort(listen)
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap().WithZone("")
		h.addrs[ip] = true
		h.anyLocal = ip.IsUnspecified()
	} else if host == "" {
		h.anyLocal = true
	} else {
		h.names[normalizeHostName(host)] = true
	}
	for _, n := range strings.Split(extra, ",") {
		if n = normalizeHostName(n); n != "" {
			h.names[n] = true
		}
	}
	if h.anyLocal {
		if as, err := net.InterfaceAddrs(); err == nil {
			for _, a := range as {
				if p, err := netip.ParsePrefix(a.String()); err == nil {
					h.addrs[p.Addr().Unmap().WithZone("")] = true
				}
			}
		}
	}
	return h
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func normalizeHostName(s string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), ".")
}

// allowed reports whether the Host header hostport names this listener.
func (h *opsHosts) allowed(hostport string) bool {
	host := hostport
	if hh, _, err := net.SplitHostPort(hostport); err == nil {
		host = hh
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap().WithZone("")
		return ip.IsLoopback() || h.addrs[ip]
	}
	host = normalizeHostName(host)
	return host != "" && (h.names[host] || strings.HasSuffix(host, ".localhost"))
}

// wrap answers requests whose Host does not name the listener 421.
func (h *opsHosts) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.allowed(r.Host) {
			now := time.Now().UnixNano()
			if last := h.lastLogged.Load(); now-last >= int64(time.Minute) && h.lastLogged.CompareAndSwap(last, now) {
				h.log.WarnContext(r.Context(), "ops: request refused: its Host does not name this listener (list the name in --ops-hosts / COURIER_OPS_HOSTS if it is yours)",
					"host", truncate(r.Host, 100), "path", truncate(r.URL.Path, 100), "remote", r.RemoteAddr)
			}
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusMisdirectedRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{
				"error": "the operators' listener answers only its own address, localhost and loopback; add this host name to --ops-hosts (COURIER_OPS_HOSTS) to reach it by name",
			})
			return
		}
		next.ServeHTTP(w, r)
	})
}
