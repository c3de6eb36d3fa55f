package testenv

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// The Docker path of the test environment. Containers are started by the separate module
// in ./containers (testcontainers-go), run with `go run`, so that choreo's own module graph,
// and so every module that imports the choreo library, carries no Docker dependency.

var dockerOnce = sync.OnceValue(func() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return pingDocker(ctx) == nil
})

// dockerAvailable reports whether a Docker engine answers, checked once per test binary.
func dockerAvailable() bool { return dockerOnce() }

// pingDocker asks the engine named by DOCKER_HOST (default unix:///var/run/docker.sock)
// for GET /_ping.
func pingDocker(ctx context.Context) error {
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	u, err := url.Parse(host)
	if err != nil {
		return fmt.Errorf("DOCKER_HOST %q: %w", host, err)
	}
	base, tr := "http://"+u.Host, &http.Transport{}
	switch u.Scheme {
	case "unix":
		base = "http://docker"
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", u.Path)
		}
	case "tcp", "http":
	default:
		return fmt.Errorf("DOCKER_HOST %q: unsupported scheme", host)
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/_ping", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("docker: GET /_ping: %s", resp.Status)
	}
	return nil
}

// container is one running helper process and the address it reported. Its stdin stays
// open for the life of the test binary; the helper removes the container when it closes.
type container struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
}

// startContainer runs the containers module for service and waits for its address.
func startContainer(service string) (*container, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return nil, errors.New("testenv: cannot locate the containers module")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("testenv: go toolchain for the containers module: %w", err)
	}
	cmd := exec.Command(gobin, "run", ".", "-service", service)
	cmd.Dir = filepath.Join(filepath.Dir(file), "containers")
	return startHelper(service+" container", cmd)
}

// startHelper starts cmd, a helper process that prints one JSON line {"Addr": ...} or
// {"Error": ...} once its service is ready, and stops the service when its standard input
// closes (at the latest when the test binary exits, however it exits).
func startHelper(what string, cmd *exec.Cmd) (*container, error) {
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testenv: start %s: %w", what, err)
	}
	var r struct{ Addr, Error string }
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &r)
	}
	switch {
	case err != nil:
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("testenv: %s: %w", what, err)
	case r.Error != "":
		_ = cmd.Wait()
		return nil, fmt.Errorf("testenv: %s: %s", what, r.Error)
	}
	return &container{cmd: cmd, stdin: stdin, addr: r.Addr}, nil
}

// containerAddr starts (once per test binary and service) a container for service and
// returns its address; the container lives as long as the test binary.
func containerAddr(service string) (string, error) {
	containersMu.Lock()
	defer containersMu.Unlock()
	if c, ok := containers[service]; ok {
		return c.addr, nil
	}
	c, err := startContainer(service)
	if err != nil {
		return "", err
	}
	containers[service] = c // referenced for the life of the binary, so stdin stays open
	return c.addr, nil
}

var (
	containersMu sync.Mutex
	containers   = map[string]*container{}
)
