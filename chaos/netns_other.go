//go:build !linux

package chaos

import (
	"errors"
	"os/exec"
)

// netns is Linux's network namespace; elsewhere the run cuts a worker off
// through its TCP proxy instead.
type netns struct{ name string }

func newNetns(int) (*netns, error) {
	return nil, errors.New("chaos: network namespace: Linux only")
}

func (*netns) addr(int) string       { return "" }
func (*netns) cut(int) error         { return errors.ErrUnsupported }
func (*netns) restore(int) error     { return errors.ErrUnsupported }
func (*netns) close()                {}
func (*netns) start(*exec.Cmd) error { return errors.ErrUnsupported }
