package chaos

import "syscall"

// procAttr puts a child in its own process group (a terminal's Ctrl-C
// reaches the run, which then stops its children in order) and has the
// kernel kill it if the run itself dies without cleaning up.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
