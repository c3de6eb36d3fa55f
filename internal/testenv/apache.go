package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/internal/testenv/freeport"
)

// testJVMOpts are the brokers' JVM options in tests, unless KAFKA_JVM_OPTS is set.
const testJVMOpts = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.awt.headless=true"

// apacheKafka starts an Apache Kafka cluster of nodes nodes with scripts/kafka.sh for the
// life of the test binary and returns its brokers, comma-separated. The script fetches the
// broker's jars with Maven on first use, and stops every node and removes their data when
// its standard input closes, that is when this binary exits.
func apacheKafka(nodes int) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate scripts/kafka.sh")
	}
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "kafka.sh")
	base, err := freeport.Consecutive(2 * nodes)
	if err != nil {
		return "", err
	}
	cmd := exec.Command(script, "run", "-w", "-n", strconv.Itoa(nodes), "-p", strconv.Itoa(base))
	if os.Getenv("KAFKA_JVM_OPTS") == "" {
		// Tests start brokers often and load them lightly: the client compiler only, and the
		// serial collector, cost a third less CPU time than the server's defaults.
		cmd.Env = append(os.Environ(), "KAFKA_JVM_OPTS="+testJVMOpts)
	}
	c, err := startHelper("Apache Kafka", cmd)
	if err != nil {
		return "", err
	}
	containersMu.Lock()
	containers["apache-kafka"] = c // referenced for the life of the binary, so stdin stays open
	containersMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := groupCoordinatorReady(ctx, strings.Split(c.addr, ",")); err != nil {
		return "", err
	}
	return c.addr, nil
}

// groupCoordinatorReady returns once a group's committed offsets can be read. A fresh
// cluster creates __consumer_offsets on the first group request and answers
// COORDINATOR_NOT_AVAILABLE until its partitions are loaded; tests that read committed
// offsets would otherwise meet that error first.
func groupCoordinatorReady(ctx context.Context, brokers []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		resp, err := adm.FetchOffsets(ctx, "testenv-ready")
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("group coordinator not ready: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
