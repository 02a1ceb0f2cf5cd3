package outbox

import (
	"context"
	"fmt"
	"sync"
)

// Handler handles one event. It must be idempotent: the ledger keeps two
// runs of the same (event, handler) from overlapping and skips it once done,
// but a crash after the effect and before the ledger mark runs it again.
//
// Return nil for success; Permanent(err) to dead-letter the event at once;
// Defer(until, reason) to run again later without spending an attempt;
// RetryAfter(err, d) or any other error to spend an attempt and retry on the
// Backoff schedule.
type Handler func(ctx context.Context, ev Event) error

// NamedHandler is a handler with the name the ledger records it under.
type NamedHandler struct {
	Name    string
	Handler Handler
}

// Registry maps event types to their handlers. It is safe for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	handlers map[string][]NamedHandler
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{handlers: map[string][]NamedHandler{}}
}

// Handle registers h under name for events of eventType. A name is the
// ledger key: keep it stable across releases. Registering the same name twice
// for one type panics, as that is a wiring bug.
func (r *Registry) Handle(eventType, name string, h Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, nh := range r.handlers[eventType] {
		if nh.Name == name {
			panic(fmt.Sprintf("outbox: handler %q registered twice for %q", name, eventType))
		}
	}
	r.handlers[eventType] = append(r.handlers[eventType], NamedHandler{Name: name, Handler: h})
}

// Handlers returns the handlers of eventType in registration order.
func (r *Registry) Handlers(eventType string) []NamedHandler {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]NamedHandler(nil), r.handlers[eventType]...)
}

type ctxKey int

const (
	keyProgress ctxKey = iota
	keyAttempt
)

// WithProgress returns a context whose Progress calls fn. Buses use it to
// let a long handler keep its claim alive (JetStream InProgress).
func WithProgress(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, keyProgress, fn)
}

// Progress tells the bus that the handler running under ctx is still busy.
// A long handler calls it now and then; it is a no-op where the bus does not
// need it.
func Progress(ctx context.Context) {
	if fn, ok := ctx.Value(keyProgress).(func()); ok && fn != nil {
		fn()
	}
}

// WithAttempt records the 1-based number of the delivery attempt in ctx.
func WithAttempt(ctx context.Context, attempt int) context.Context {
	return context.WithValue(ctx, keyAttempt, attempt)
}

// Attempt returns the 1-based number of the current delivery attempt, or 0
// outside a bus.
func Attempt(ctx context.Context) int {
	n, _ := ctx.Value(keyAttempt).(int)
	return n
}
