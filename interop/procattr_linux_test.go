//go:build linux

package interop

import "syscall"

// childAttr has the kernel stop a child process when the test binary dies
// without cleaning up (a -timeout panic, a SIGKILL).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
