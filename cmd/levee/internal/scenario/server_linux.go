//go:build linux

package scenario

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the child get SIGKILL if the demo process dies, so a
// crashed or killed demo leaves no server behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
