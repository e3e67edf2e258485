package lockserver

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// allStopped tells a running process from a stopped one, and waitStopped
// returns only once SIGSTOP has landed.
func TestWaitStoppedSeesTheStop(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc: Pause does not wait there")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	if allStopped(pid) {
		t.Fatal("a running process read as stopped")
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(pid, 30*time.Second)
	if !allStopped(pid) {
		t.Fatal("waitStopped returned before the process stopped")
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}
