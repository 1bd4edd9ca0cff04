// Package dbtest starts throwaway PostgreSQL and MariaDB servers, configured
// for change data capture, in temporary directories on free ports. Tests,
// benchmarks and demo programs share it; the helpers that take a testing.TB
// live in testmain.go.
package dbtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// password is the superuser password of every server this package starts.
const password = "sluice-test-pw"

// startTimeout bounds how long a freshly started server may take to accept
// connections; a loaded 2-core machine running several test binaries at once
// can be slow, but a server that needs longer than this is broken.
const startTimeout = 90 * time.Second

// account is a system user the servers run as: PostgreSQL refuses to run as
// root, and running mariadbd as mysql directly (instead of letting it drop
// privileges with --user) keeps the parent-death signal, which the kernel
// clears when a process changes its own credentials.
type account struct {
	name     string
	uid, gid uint32
}

func lookupAccount(name string) (account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return account{}, fmt.Errorf("look up system account %q: %w", name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return account{}, fmt.Errorf("parse uid %q of account %q: %w", u.Uid, name, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return account{}, fmt.Errorf("parse gid %q of account %q: %w", u.Gid, name, err)
	}
	return account{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
}

// sysProcAttr runs a child as acct (when we are root; otherwise as ourselves)
// in its own process group, and makes the kernel send it deathSig when the
// test binary dies, so an aborted run leaves no servers behind. (The kernel
// sends it when the forking thread exits; Go keeps its threads for the life
// of the process unless a goroutine locked to one exits, which nothing here
// does.) Only the temp dir survives such a death.
func (a account) sysProcAttr(deathSig syscall.Signal) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: deathSig}
	if os.Geteuid() == 0 {
		attr.Credential = &syscall.Credential{Uid: a.uid, Gid: a.gid}
	}
	return attr
}

// chown hands paths to acct when we are root, so the server can write them.
func (a account) chown(paths ...string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	for _, p := range paths {
		if err := os.Chown(p, int(a.uid), int(a.gid)); err != nil {
			return fmt.Errorf("chown %s to %s: %w", p, a.name, err)
		}
	}
	return nil
}

// freePort asks the kernel for a free TCP port on 127.0.0.1. Another process
// may take it before the server binds it; callers retry on "address in use".
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// process is a running server.
type process struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has exited
	waitErr error         // valid after done is closed
}

// startProcess starts bin with its stdout and stderr appended to logPath.
func startProcess(name string, acct account, deathSig syscall.Signal, logPath, bin string, args ...string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	// The child gets its own copy of the descriptor; ours is not needed after Start.
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = childEnv()
	cmd.SysProcAttr = acct.sysProcAttr(deathSig)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig and waits up to grace for the process to exit, then kills
// its whole process group.
func (p *process) stop(sig syscall.Signal, grace time.Duration) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return fmt.Errorf("%s did not shut down within %s after %s; killed it", p.name, grace, sig)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s survived SIGKILL", p.name)
	}
}

// childEnv is our environment without the libpq and MySQL client variables,
// which would otherwise leak the developer's settings into the servers' tools.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "MYSQL") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// runTool runs a short-lived setup program (initdb, mariadb-install-db) as
// acct and returns its combined output in the error when it fails.
func runTool(ctx context.Context, acct account, bin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = childEnv()
	cmd.SysProcAttr = acct.sysProcAttr(syscall.SIGKILL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("run %s: %w\n%s", filepath.Base(bin), err, tail(out, 4096))
	}
	return nil
}

// logTail returns the end of a server log, for error messages.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log %s: %v)", path, err)
	}
	defer f.Close()
	const n = 4096
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(fi.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return fmt.Sprintf("--- tail of %s ---\n%s", path, b)
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// addrInUse reports whether a server failed because its port was taken
// between freePort and the server's bind.
func addrInUse(log string) bool {
	return strings.Contains(log, "in use") || strings.Contains(log, "could not bind")
}

// newTempDir makes the instance's directory and hands it to acct.
func newTempDir(prefix string, acct account) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", fmt.Errorf("create temp dir: %w", err)
	}
	if err := acct.chown(dir); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// pollUntil calls try until it succeeds, the process exits, ctx ends or
// startTimeout passes, returning the last error from try.
func pollUntil(ctx context.Context, p *process, try func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		attemptCtx, attemptCancel := context.WithTimeout(ctx, 2*time.Second)
		err := try(attemptCtx)
		attemptCancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before accepting connections (%v): %w", p.name, p.waitErr, err)
		case <-ctx.Done():
			return fmt.Errorf("%s not accepting connections: %w (last error: %v)", p.name, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// pid is the process's id; 0 when there is no process.
func (p *process) pid() int {
	if p == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}
