package main

import (
	"context"
	"io"

	"github.com/gorilla/mux"
)

// registerAdmin mounts the admin API when an admin token is set.
func (a *app) registerAdmin(r *mux.Router) error { return nil }

func adminCommand(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	return usageError("admin: not available in this build")
}
