package main

import (
	"context"
	"io"
)

func adminCommand(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	return usageError("admin: not available in this build")
}
