//go:build !linux

package chaos

import (
	"context"
	"errors"
	"log/slog"
	"syscall"
)

// pgCluster is the run's own PostgreSQL, made and restarted on Linux only;
// elsewhere a run on PostgreSQL needs Config.PostgresURL.
type pgCluster struct {
	dir  string
	port int
}

var errNoCluster = errors.New("chaos: the run's own PostgreSQL needs Linux: give a server's URL (--postgres-url)")

func newPGCluster(string, int, *netns, *slog.Logger) (*pgCluster, error) { return nil, errNoCluster }

func (*pgCluster) dsn(string, string) string                            { return "" }
func (*pgCluster) start(string) error                                   { return errNoCluster }
func (*pgCluster) stop(syscall.Signal)                                  {}
func (*pgCluster) running() bool                                        { return false }
func (*pgCluster) createDatabase(context.Context, string, string) error { return errNoCluster }
