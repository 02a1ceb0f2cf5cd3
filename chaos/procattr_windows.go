package chaos

import "syscall"

// procAttr needs nothing special on Windows, where the run stops its
// children itself.
func procAttr() *syscall.SysProcAttr { return nil }
