package testenv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
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
	base, err := freePorts(2 * nodes)
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
	return c.addr, nil
}

// freePorts returns the first of n consecutive loopback ports that are free now.
func freePorts(n int) (int, error) {
	for range 50 {
		base := 20000 + rand.IntN(30000)
		var lns []net.Listener
		for p := base; p < base+n; p++ {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == n {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports on 127.0.0.1", n)
}
