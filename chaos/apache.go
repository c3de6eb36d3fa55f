package chaos

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/services/events"

	"github.com/choreo-saga/choreo/internal/testenv/freeport"
)

// The Apache Kafka cluster of a System with Options.ApacheNodes: scripts/kafka.sh fetches
// the jars and writes each node's server.properties (node i is node.id i, combined
// controller and broker, replication factor 3 and min.insync.replicas 2 on three nodes);
// the harness formats the nodes and runs each one as a process of its own, so that a
// fault can kill, pause or restart a single broker.

// apacheTopicConfig is what every topic of the cluster is created with, beside the
// replication factor of all its nodes.
func apacheTopicConfig(nodes int) map[string]*string {
	isr := "1"
	if nodes > 1 {
		isr = "2"
	}
	return map[string]*string{"min.insync.replicas": &isr}
}

// apacheJVM are the nodes' JVM options unless KAFKA_HEAP_OPTS or KAFKA_JVM_OPTS (as for
// scripts/kafka.sh) replace them: a small heap, and the client compiler and serial
// collector, which cost three brokers on a 2-core machine much less CPU time than the
// server's defaults.
const (
	apacheHeap = "-Xms256m -Xmx768m"
	apacheJVM  = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.awt.headless=true"
)

// startApache formats and starts an Apache Kafka cluster of Options.ApacheNodes nodes,
// waits until every broker is unfenced and the group coordinator answers, and creates
// the saga topics and their dead-letter topics (Options.Partitions partitions,
// replicated on every node).
func (s *System) startApache(ctx context.Context) error {
	n := s.opts.ApacheNodes
	if n != 1 && n != 3 {
		return fmt.Errorf("chaos: Apache Kafka clusters have 1 or 3 nodes, not %d", n)
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return fmt.Errorf("chaos: Apache Kafka needs a JDK 17+ (apt-get install openjdk-17-jdk-headless): %w", err)
	}
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	script := filepath.Join(root, "scripts", "kafka.sh")
	out, err := exec.CommandContext(ctx, script, "fetch").Output()
	if err != nil {
		return fmt.Errorf("chaos: scripts/kafka.sh fetch: %w", err)
	}
	libs := strings.TrimSpace(string(out))
	base, err := freeport.Consecutive(2 * n)
	if err != nil {
		return err
	}
	dir := filepath.Join(s.dir, "apache")
	var idb [16]byte
	_, _ = rand.Read(idb[:])
	clusterID := base64.RawURLEncoding.EncodeToString(idb[:])
	heap, jvm := envOr("KAFKA_HEAP_OPTS", apacheHeap), envOr("KAFKA_JVM_OPTS", apacheJVM)

	var (
		wg   sync.WaitGroup
		errs = make([]error, n)
	)
	// Each node logs to its own directory, warnings only from org.apache.kafka.
	logConfig, err := exec.CommandContext(ctx, script, "log4j").Output()
	if err != nil {
		return fmt.Errorf("chaos: scripts/kafka.sh log4j: %w", err)
	}
	for i := 1; i <= n; i++ {
		nd := filepath.Join(dir, "node-"+strconv.Itoa(i))
		if err := os.MkdirAll(nd, 0o755); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		props, err := exec.CommandContext(ctx, script, "config", "-n", strconv.Itoa(n), "-p", strconv.Itoa(base),
			"-d", dir, "-i", strconv.Itoa(i)).Output()
		if err != nil {
			return fmt.Errorf("chaos: scripts/kafka.sh config: %w", err)
		}
		propsPath, log4j := filepath.Join(nd, "server.properties"), filepath.Join(nd, "log4j2.properties")
		if err := os.WriteFile(propsPath, props, 0o644); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		if err := os.WriteFile(log4j, logConfig, 0o644); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		common := []string{"-cp", filepath.Join(libs, "*"), "-Dlog4j2.configurationFile=" + log4j, "-Dkafka.logs.dir=" + nd}
		// StorageTool writes the node's meta.properties and the cluster's bootstrap
		// metadata; the nodes are formatted in parallel.
		wg.Go(func() {
			args := append([]string{"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"}, common...)
			args = append(args, "kafka.tools.StorageTool", "format", "--cluster-id="+clusterID, "--config", propsPath, "--ignore-formatted")
			if out, err := exec.CommandContext(ctx, java, args...).CombinedOutput(); err != nil {
				errs[i-1] = fmt.Errorf("chaos: format Apache Kafka node %d: %w\n%s", i, err, out)
			}
		})
		args := append(slices.Concat(strings.Fields(heap), strings.Fields(jvm)), common...)
		args = append(args, "kafka.Kafka", propsPath)
		s.apache = append(s.apache, &proc{name: "kafka-" + strconv.Itoa(i), path: java, args: args, logPath: s.logPath("kafka-" + strconv.Itoa(i))})
		s.apacheAddrs = append(s.apacheAddrs, "127.0.0.1:"+strconv.Itoa(base+2*(i-1)))
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, p := range s.apache {
		if err := p.start(); err != nil {
			return err
		}
	}
	s.kafkaAddr = strings.Join(s.apacheAddrs, ",")
	s.brokers = s.kafkaAddr

	cl, err := kgo.NewClient(kgo.SeedBrokers(s.apacheAddrs...))
	if err != nil {
		return fmt.Errorf("chaos: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := s.waitApache(rctx, adm, func(m kadm.Metadata) error {
		if len(m.Brokers) < n {
			return fmt.Errorf("%d of %d brokers unfenced", len(m.Brokers), n)
		}
		return nil
	}); err != nil {
		return err
	}
	var topics []string
	for _, t := range events.Topics {
		topics = append(topics, t, consumer.DeadLetterTopic(t))
	}
	resp, err := adm.CreateTopics(rctx, int32(s.opts.Partitions), int16(n), apacheTopicConfig(n), topics...)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("chaos: create topics on Apache Kafka: %w", err)
	}
	// Every partition led and fully replicated, and the group coordinator loaded (a fresh
	// cluster creates __consumer_offsets on the first group request).
	if err := s.waitApache(rctx, adm, func(m kadm.Metadata) error {
		for _, t := range topics {
			td, ok := m.Topics[t]
			if !ok || len(td.Partitions) < s.opts.Partitions {
				return fmt.Errorf("topic %s not listed with its partitions", t)
			}
			for _, p := range td.Partitions {
				if p.Leader < 0 || len(p.ISR) < n {
					return fmt.Errorf("%s/%d: leader %d, ISR %v", t, p.Partition, p.Leader, p.ISR)
				}
			}
		}
		resp, err := adm.FetchOffsets(rctx, "chaos-ready")
		if err == nil {
			err = resp.Error()
		}
		return err
	}); err != nil {
		return err
	}
	s.logf("Apache Kafka: %d nodes (controller and broker each) at %s, topics with replication factor %d and min.insync.replicas %s",
		n, s.kafkaAddr, n, *apacheTopicConfig(n)["min.insync.replicas"])
	return nil
}

// waitApache polls the cluster's metadata until ok accepts it or ctx ends; it fails at
// once when a node exited.
func (s *System) waitApache(ctx context.Context, adm *kadm.Client, ok func(kadm.Metadata) error) error {
	var last error
	for {
		for _, p := range s.apache {
			if !p.running() {
				return fmt.Errorf("chaos: Apache Kafka node %s exited; last log lines:\n%s", p.name, p.tail(20))
			}
		}
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := adm.Metadata(mctx)
		cancel()
		if err == nil {
			err = ok(m)
		}
		if err == nil {
			return nil
		}
		last = err
		if !sleep(ctx, 200*time.Millisecond) {
			return fmt.Errorf("chaos: Apache Kafka not ready: %w (%w)", ctx.Err(), last)
		}
	}
}

// stopApache stops every node (SIGTERM, then SIGKILL after 20 s), in parallel.
func (s *System) stopApache() {
	var wg sync.WaitGroup
	for _, p := range s.apache {
		wg.Go(func() { p.stop(20 * time.Second) })
	}
	wg.Wait()
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// seeds are the brokers a client of the harness bootstraps from: every node of an
// Apache Kafka cluster, or devkafka (or its proxy).
func (s *System) seeds() []string { return strings.Split(s.brokers, ",") }
