package testenv

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

var dockerOnce = sync.OnceValue(func() bool {
	if os.Getenv("DOCKER_HOST") == "" {
		if _, err := os.Stat("/var/run/docker.sock"); err != nil {
			return false
		}
	}
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.Health(ctx) == nil
})

// dockerAvailable reports whether a Docker engine answers, checked once per test binary.
func dockerAvailable() bool { return dockerOnce() }
