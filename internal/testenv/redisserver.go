package testenv

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RedisServer runs a redis-server of the test's own on a free port of 127.0.0.1 that
// requires password (for user default), without persistence; with tlsFiles it serves
// TLS only, with their server certificate. It returns the server's host:port and stops
// the server when the test ends. Unlike [Redis], it is for tests of authentication and
// TLS, which the shared Redis does not require.
func RedisServer(t testing.TB, password string, tlsFiles *TLSFiles) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("testenv: redis-server not installed (apt-get install redis-server): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	args := []string{"--bind", "127.0.0.1", "--requirepass", password, "--save", "", "--appendonly", "no",
		"--dir", t.TempDir()}
	if tlsFiles != nil {
		args = append(args, "--port", "0", "--tls-port", port, "--tls-cert-file", tlsFiles.ServerCertFile,
			"--tls-key-file", tlsFiles.ServerKeyFile, "--tls-ca-cert-file", tlsFiles.CAFile, "--tls-auth-clients", "no")
	} else {
		args = append(args, "--port", port)
	}
	cmd := exec.Command(bin, args...)
	out := &lockedBuilder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + port
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: redis-server did not listen on %s: %v\n%s", addr, err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
