package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/choreo-saga/choreo/internal/topicready"
)

// sharedKafka is an external broker (environment, Apache Kafka started by this binary, or
// container); empty means none, and each test gets its own kfake cluster.
var sharedKafka = sync.OnceValue(func() kafkaResolved {
	if b := os.Getenv("CHOREO_TEST_KAFKA_BROKERS"); b != "" {
		return kafkaResolved{value: b}
	}
	switch kind := os.Getenv("CHOREO_TEST_KAFKA"); kind {
	case "apache", "apache:1", "apache:3":
		nodes := 1
		if kind == "apache:3" {
			nodes = 3
		}
		brokers, err := apacheKafka(nodes)
		if err != nil {
			return kafkaResolved{err: fmt.Errorf("Apache Kafka (CHOREO_TEST_KAFKA=%s): %w", kind, err)}
		}
		return kafkaResolved{value: brokers, owned: true}
	case "", "kfake":
	default:
		return kafkaResolved{err: fmt.Errorf("CHOREO_TEST_KAFKA=%q: want kfake, apache or apache:3", kind)}
	}
	if dockerAvailable() {
		brokers, err := containerAddr("kafka")
		if err != nil {
			return kafkaResolved{err: fmt.Errorf("testcontainers kafka: %w", err)}
		}
		return kafkaResolved{value: brokers, owned: true}
	}
	return kafkaResolved{}
})

// kafkaResolved is the binary's Kafka: brokers (empty: kfake per test), or why none.
type kafkaResolved struct {
	value string
	err   error
	owned bool // started by this binary, so EmptyKafka may empty it
}

// Kafka returns seed brokers for this test: CHOREO_TEST_KAFKA_BROKERS, else with
// CHOREO_TEST_KAFKA=apache (or apache:3) an Apache Kafka cluster of 1 (or 3) nodes
// started once per test binary (scripts/kafka.sh), else a Kafka container when Docker
// answers, else a fresh in-process kfake cluster closed at cleanup. Topics are never shared
// between tests: create them with Topic.
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

// EmptyKafka returns seed brokers without topics or consumer groups, for tests whose code
// uses fixed topic and group names (a whole service): a fresh kfake cluster, or the broker
// this binary started (Apache Kafka or a container) after deleting every topic and group on
// it. Tests calling it must not run in parallel with other Kafka tests of their binary. A
// broker named by CHOREO_TEST_KAFKA_BROKERS is never emptied: the test gets kfake.
func EmptyKafka(t testing.TB) []string {
	t.Helper()
	r := sharedKafka()
	if r.err != nil {
		t.Fatalf("testenv: Kafka: %v", r.err)
	}
	if !r.owned {
		return KafkaCluster(t).ListenAddrs()
	}
	brokers := strings.Split(r.value, ",")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := emptyBroker(ctx, brokers); err != nil {
		t.Fatalf("testenv: empty the Kafka cluster: %v", err)
	}
	return brokers
}

// emptyBroker deletes every topic (but Kafka's internal ones) and every consumer group, and
// returns once the metadata lists no topic.
func emptyBroker(ctx context.Context, brokers []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		return fmt.Errorf("list groups: %w", err)
	}
	if names := groups.Groups(); len(names) > 0 {
		if err := removeMembers(ctx, cl, names); err != nil {
			return err
		}
		resp, err := adm.DeleteGroups(ctx, names...)
		if err != nil {
			return fmt.Errorf("delete groups: %w", err)
		}
		for _, g := range resp.Sorted() {
			if g.Err != nil && !errors.Is(g.Err, kerr.GroupIDNotFound) {
				return fmt.Errorf("delete group %s: %w", g.Group, g.Err)
			}
		}
	}
	for {
		topics, err := adm.ListTopics(ctx)
		if err != nil {
			return fmt.Errorf("list topics: %w", err)
		}
		if len(topics) == 0 {
			return nil
		}
		resp, err := adm.DeleteTopics(ctx, topics.Names()...)
		if err != nil {
			return fmt.Errorf("delete topics: %w", err)
		}
		for _, d := range resp.Sorted() {
			if d.Err != nil && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
				return fmt.Errorf("delete topic %s: %w", d.Topic, d.Err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// removeMembers removes every member of groups, as a member's LeaveGroup would: a
// previous test's static members, and members of a client that did not leave, stay in
// their group until their session times out, and a group with members cannot be deleted.
func removeMembers(ctx context.Context, cl *kgo.Client, groups []string) error {
	described, err := kadm.NewClient(cl).DescribeGroups(ctx, groups...)
	if err != nil {
		return fmt.Errorf("describe groups: %w", err)
	}
	for _, g := range described.Sorted() {
		if len(g.Members) == 0 {
			continue
		}
		req := kmsg.NewPtrLeaveGroupRequest()
		req.Group = g.Group
		for _, m := range g.Members {
			lm := kmsg.NewLeaveGroupRequestMember()
			lm.MemberID, lm.InstanceID = m.MemberID, m.InstanceID
			req.Members = append(req.Members, lm)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil {
			return fmt.Errorf("remove the members of group %s: %w", g.Group, err)
		}
	}
	return nil
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
// brokers, replicated as the broker's default.replication.factor says, and returns its
// name.
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
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, -1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err == nil {
		err = topicready.Wait(ctx, cl, name)
	}
	if err != nil {
		t.Fatalf("testenv: create topic %s: %v", name, err)
	}
	return name
}
