// Command containers starts one backing service of the tests (Postgres, Redis or Kafka) in
// a Docker container with testcontainers-go, prints its address as one JSON line on
// stdout, and keeps it running until its standard input closes (the test binary that
// started it exited), then removes it.
//
// It is a module of its own so that choreo's module, and so every module that imports the
// choreo library, carries no Docker or testcontainers dependency; internal/testenv runs it
// with `go run` only when the local services are missing and a Docker engine answers.
//
//	go run . -service postgres   # {"addr":"postgres://postgres:postgres@127.0.0.1:49153/postgres?sslmode=disable"}
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tckafka "github.com/testcontainers/testcontainers-go/modules/kafka"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// Images of the services, pinned.
const (
	postgresImage = "postgres:16-alpine"
	redisImage    = "redis:7-alpine"
	kafkaImage    = "confluentinc/confluent-local:7.5.0"
)

// reply is the one line written on stdout.
type reply struct {
	Addr  string `json:"addr,omitempty"`
	Error string `json:"error,omitempty"`
}

func main() {
	service := flag.String("service", "", "postgres, redis or kafka")
	flag.Parse()
	out := json.NewEncoder(os.Stdout)
	c, addr, err := start(*service)
	if err != nil {
		_ = out.Encode(reply{Error: err.Error()})
		os.Exit(1)
	}
	_ = out.Encode(reply{Addr: addr})
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test binary exits
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Terminate(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "containers: terminate:", err)
		os.Exit(1)
	}
}

func start(service string) (testcontainers.Container, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	switch service {
	case "postgres":
		c, err := tcpostgres.Run(ctx, postgresImage, tcpostgres.WithUsername("postgres"),
			tcpostgres.WithPassword("postgres"), tcpostgres.BasicWaitStrategies())
		if err != nil {
			return nil, "", err
		}
		dsn, err := c.ConnectionString(ctx, "sslmode=disable")
		return c, dsn, err
	case "redis":
		c, err := tcredis.Run(ctx, redisImage)
		if err != nil {
			return nil, "", err
		}
		uri, err := c.ConnectionString(ctx)
		return c, strings.TrimPrefix(uri, "redis://"), err
	case "kafka":
		c, err := tckafka.Run(ctx, kafkaImage, tckafka.WithClusterID("choreo-test"))
		if err != nil {
			return nil, "", err
		}
		brokers, err := c.Brokers(ctx)
		return c, strings.Join(brokers, ","), err
	}
	return nil, "", errors.New("-service must be postgres, redis or kafka")
}
