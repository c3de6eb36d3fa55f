package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process the harness started and may kill, pause and restart. Its
// output is appended to a log file, across restarts.
type proc struct {
	name    string
	path    string
	args    []string
	env     []string
	logPath string
	// ready, if set, is the URL whose 200 answer means the process is ready.
	ready string

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{} // closed when the current run exited
	runs  int
	kills int
}

// start starts the process (again). It is an error to start a running process.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("chaos: %s is already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: log of %s: %w", p.name, err)
	}
	fmt.Fprintf(logf, "\n=== chaos: start %s (run %d) at %s\n", p.name, p.runs+1, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a Ctrl-C at the terminal reaches only the harness (which
	// then stops everything in order), and a parent-death signal, so a harness killed
	// with -9 does not leave its children running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("chaos: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	p.runs++
	return nil
}

func isClosed(c chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// pid returns the process id of the current run, or 0 when it is not running.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return 0
	}
	return p.cmd.Process.Pid
}

// running reports whether the current run has not exited.
func (p *proc) running() bool { return p.pid() != 0 }

// signal sends sig to the current run.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return fmt.Errorf("chaos: %s is not running", p.name)
	}
	return p.cmd.Process.Signal(sig)
}

// kill9 kills the current run with SIGKILL and waits (at most 10 s) until it is gone.
func (p *proc) kill9() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return fmt.Errorf("chaos: %s is not running", p.name)
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused process dies as well, but be sure
	if err := cmd.Process.Kill(); err != nil {
		return fmt.Errorf("chaos: kill -9 %s: %w", p.name, err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("chaos: %s (pid %d) did not exit within 10s of SIGKILL", p.name, cmd.Process.Pid)
	}
	p.mu.Lock()
	p.kills++
	p.mu.Unlock()
	return nil
}

// stop asks the current run to stop (SIGTERM, after SIGCONT in case it is paused) and
// kills it when it has not exited after grace.
func (p *proc) stop(grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return
	case <-time.After(grace):
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// waitReady polls the ready URL (or, without one, a TCP connect to addr) until it
// answers or ctx ends; it fails at once when the process exits.
func (p *proc) waitReady(ctx context.Context, client *http.Client) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	for {
		if p.ready != "" {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.ready, nil)
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: %s not ready at %s: %w; last log lines:\n%s", p.name, p.ready, ctx.Err(), p.tail(15))
		case <-done:
			return fmt.Errorf("chaos: %s exited before it was ready; last log lines:\n%s", p.name, p.tail(15))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("chaos: free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// socketInodes returns the inodes of the sockets pid has open.
func socketInodes(pid int) map[string]bool {
	out := make(map[string]bool)
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return out
	}
	for _, e := range ents {
		l, err := os.Readlink(dir + "/" + e.Name())
		if err == nil && strings.HasPrefix(l, "socket:[") {
			out[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	return out
}

// localPortInodes maps the local port of every TCP socket of this network namespace to
// its inode, from /proc/net/tcp and tcp6.
func localPortInodes() map[int][]string {
	out := make(map[int][]string)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for i, line := range strings.Split(string(b), "\n") {
			fs := strings.Fields(line)
			if i == 0 || len(fs) < 10 {
				continue
			}
			_, portHex, ok := strings.Cut(fs[1], ":")
			if !ok {
				continue
			}
			port, err := strconv.ParseInt(portHex, 16, 32)
			if err != nil {
				continue
			}
			out[int(port)] = append(out[int(port)], fs[9])
		}
	}
	return out
}

// ownerOfPort returns the process among procs that has a TCP socket bound locally to
// port (the client side of a Postgres session, say), or nil.
func ownerOfPort(port int, procs []*proc) *proc {
	inodes := localPortInodes()[port]
	for _, p := range procs {
		pid := p.pid()
		if pid == 0 {
			continue
		}
		socks := socketInodes(pid)
		for _, in := range inodes {
			if socks[in] {
				return p
			}
		}
	}
	return nil
}
