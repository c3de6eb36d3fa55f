package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// sharedKafka is an external broker (environment or container); empty means none, and each
// test gets its own kfake cluster.
var sharedKafka = sync.OnceValue(func() resolved {
	if b := os.Getenv("CHOREO_TEST_KAFKA_BROKERS"); b != "" {
		return resolved{value: b}
	}
	if dockerAvailable() {
		brokers, err := containerAddr("kafka")
		if err != nil {
			return resolved{err: fmt.Errorf("testcontainers kafka: %w", err)}
		}
		return resolved{value: brokers}
	}
	return resolved{}
})

// Kafka returns seed brokers for this test: CHOREO_TEST_KAFKA_BROKERS, else a Kafka
// container when Docker answers, else a fresh in-process kfake cluster closed at cleanup.
// Topics are never shared between tests: create them with Topic.
func Kafka(t testing.TB) []string {
	t.Helper()
	r := sharedKafka()
	if r.err != nil {
		t.Fatalf("testenv: Kafka: %v", r.err)
	}
	if r.value != "" {
		return strings.Split(r.value, ",")
	}
	return KafkaCluster(t).ListenAddrs()
}

// KafkaCluster returns a fresh in-process kfake cluster (one broker, auto topic creation
// off unless opts say otherwise) for tests that inject faults or stop the broker. It is
// closed when the test ends.
func KafkaCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("testenv: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// Topic creates a topic with a name unique to this call and the given partition count on
// brokers, and returns its name.
func Topic(t testing.TB, brokers []string, partitions int32) string {
	t.Helper()
	name := strings.ReplaceAll(Name(t, "t"), "_", "-")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("testenv: kafka client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("testenv: create topic %s: %v", name, err)
	}
	return name
}
