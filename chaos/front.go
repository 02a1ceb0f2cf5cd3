package chaos

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// front is the one address of courier when the run starts several server
// processes, as a load balancer would be: every request goes to the next
// server in turn, and a server that refuses the connection (killed, not up
// yet) is skipped for the next one. The request's Host stays as the client
// sent it, so signatures over it verify. A request that reached a server
// which then died gets 502, as it would from a real balancer.
type front struct {
	backends []*url.URL
	next     atomic.Uint64
	srv      *http.Server
	ln       net.Listener
	wg       sync.WaitGroup
	proxies  []*httputil.ReverseProxy
	dialer   net.Dialer
}

func newFront(listen string, backends []string, logger *slog.Logger) (*front, error) {
	f := &front{dialer: net.Dialer{Timeout: 2 * time.Second}}
	for _, b := range backends {
		u, err := url.Parse("http://" + b)
		if err != nil {
			return nil, fmt.Errorf("chaos: front: %w", err)
		}
		f.backends = append(f.backends, u)
		f.proxies = append(f.proxies, &httputil.ReverseProxy{
			Rewrite: func(r *httputil.ProxyRequest) {
				r.SetURL(u)
				r.Out.Host = r.In.Host
			},
			Transport: &http.Transport{DialContext: f.dialer.DialContext, MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second},
			ErrorLog:  slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
		})
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("chaos: front: %w", err)
	}
	f.ln = ln
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve), ReadHeaderTimeout: 10 * time.Second}
	f.wg.Go(func() {
		if err := f.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("front", "err", err)
		}
	})
	return f, nil
}

// serve picks the next server that accepts a connection (a quick probe
// dial) and proxies the request to it; 503 when none does.
func (f *front) serve(w http.ResponseWriter, r *http.Request) {
	n := len(f.backends)
	start := int(f.next.Add(1))
	for i := range n {
		k := (start + i) % n
		c, err := f.dialer.DialContext(r.Context(), "tcp", f.backends[k].Host)
		if err != nil {
			continue
		}
		c.Close()
		f.proxies[k].ServeHTTP(w, r)
		return
	}
	http.Error(w, "no server up", http.StatusServiceUnavailable)
}

func (f *front) close() {
	_ = f.srv.Close() // the run is over; open requests fail
	f.wg.Wait()
}
