//go:build tools

// Package courier pins the modules its packages use while they are written.
package courier

import (
	_ "github.com/go-fed/httpsig"
	_ "github.com/google/uuid"
	_ "github.com/gorilla/mux"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/collectors"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "golang.org/x/sync/errgroup"
	_ "modernc.org/sqlite"
)
