//go:build linux

package e2e

import "syscall"

// sysProcAttr makes a child die with the test binary, so an interrupted test
// run leaves no ax processes behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
