package chaos

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// brokerReadyTimeout bounds the wait for an embedded NATS server to accept
// connections.
const brokerReadyTimeout = 10 * time.Second

// broker is an embedded JetStream server on loopback with a file store. It
// can be stopped and started again on the same port and store, which is how
// a run simulates a broker outage: streams, consumers and the dedup window
// survive, as they do when a real server restarts.
type broker struct {
	dir string

	mu   sync.Mutex
	port int // -1 until the first start picked one
	srv  *server.Server
}

func newBroker(dir string) *broker { return &broker{dir: dir, port: -1} }

// start starts the server (on the port of the first start, if any) and
// waits until it accepts connections.
func (b *broker) start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.srv != nil {
		return nil
	}
	s, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      b.port,
		JetStream: true,
		StoreDir:  b.dir,
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		return fmt.Errorf("chaos: broker: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(brokerReadyTimeout) {
		s.Shutdown()
		s.WaitForShutdown()
		return errors.New("chaos: broker: not ready for connections within 10s")
	}
	if b.port == -1 {
		addr, ok := s.Addr().(*net.TCPAddr)
		if !ok {
			s.Shutdown()
			s.WaitForShutdown()
			return errors.New("chaos: broker: no TCP address")
		}
		b.port = addr.Port
	}
	b.srv = s
	return nil
}

// stop shuts the server down (gracefully: its file store is flushed) and
// waits for it.
func (b *broker) stop() {
	b.mu.Lock()
	s := b.srv
	b.srv = nil
	b.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// running reports whether the server is up.
func (b *broker) running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.srv != nil
}

// url is the client URL; valid after the first start.
func (b *broker) url() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("nats://127.0.0.1:%d", b.port)
}
