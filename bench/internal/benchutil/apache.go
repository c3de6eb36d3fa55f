package benchutil

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/choreo-saga/choreo/internal/testenv/freeport"
)

// StartApacheKafka starts a one-node Apache Kafka cluster with scripts/kafka.sh (its jars
// fetched by Maven on first use) on free loopback ports, and returns its address and a
// function that stops it and removes its data.
func StartApacheKafka() (addr string, stop func(), err error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", nil, errors.New("benchutil: cannot locate scripts/kafka.sh")
	}
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "kafka.sh")
	port, err := freeport.Consecutive(2) // the node's clients' port and its controller's
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(script, "run", "-w", "-n", "1", "-p", strconv.Itoa(port))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("benchutil: start Apache Kafka: %w", err)
	}
	stop = func() { stdin.Close(); _ = cmd.Wait() }
	var r struct{ Addr string }
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &r)
	}
	if err != nil || r.Addr == "" {
		stop()
		return "", nil, fmt.Errorf("benchutil: Apache Kafka did not start: %v (%q)", err, line)
	}
	return r.Addr, stop, nil
}
