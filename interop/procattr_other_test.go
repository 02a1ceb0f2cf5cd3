//go:build !linux

package interop

import "syscall"

// childAttr is nil where the kernel cannot stop a child when its parent
// dies: the test's cleanup stops the children (and the peer also exits when
// its stdin closes).
func childAttr() *syscall.SysProcAttr { return nil }
