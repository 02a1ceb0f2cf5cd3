//go:build !linux && !windows

package chaos

import "syscall"

// procAttr puts a child in its own process group, so a terminal's Ctrl-C
// reaches the run, which then stops its children in order.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
