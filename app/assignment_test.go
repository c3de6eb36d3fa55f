package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/internal/testenv"
)

// The consumer readiness check fails only for a member that has held no partition for
// longer than the grace period while its group has lag; the lag is read from the broker.
func TestAssignmentCheck(t *testing.T) {
	ctx := context.Background()
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 2)
	group := testenv.Name(t, "g")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	for i := range 4 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	commit := func(at int64) {
		t.Helper()
		os := kadm.Offsets{}
		for p := range int32(2) {
			os.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1})
		}
		resp, err := adm.CommitOffsets(ctx, group, os)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	const grace = time.Minute
	check := func(n int, since time.Time) error {
		return assignmentCheck(group, func() (int, time.Time) { return n, since }, adm, grace)(ctx)
	}

	commit(1) // one record of lag per partition
	long := time.Now().Add(-2 * grace)
	if err := check(2, time.Time{}); err != nil {
		t.Errorf("member holding partitions: %v", err)
	}
	if err := check(0, time.Time{}); err != nil {
		t.Errorf("member not running yet: %v", err)
	}
	if err := check(0, time.Now()); err != nil {
		t.Errorf("member idle within the grace period: %v", err)
	}
	err = check(0, long)
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "lag of 2 records") || !strings.Contains(err.Error(), group) {
		t.Errorf("member idle past the grace period while the group has lag: %v", err)
	}
	commit(2) // caught up
	if err := check(0, long); err != nil {
		t.Errorf("member idle past the grace period, group caught up: %v", err)
	}
}

func TestKafkaMembershipConfig(t *testing.T) {
	env := MapEnv(nil)
	c := LoadConfig(env, "order", ":8081")
	if env.Err() != nil || c.KafkaInstanceID != "" || c.KafkaSessionTimeout != defaultKafkaSessionTimeout ||
		c.KafkaRebalanceTimeout != defaultKafkaRebalanceTimeout {
		t.Fatalf("defaults (dynamic membership): %+v %v", c, env.Err())
	}
	env = MapEnv(map[string]string{envKafkaInstanceID: "order-a", envKafkaSessionTimeout: "20s", envKafkaRebalanceTimeout: "1m"})
	c = LoadConfig(env, "order", ":8081")
	if env.Err() != nil || c.KafkaInstanceID != "order-a" || c.KafkaSessionTimeout != 20*time.Second ||
		c.KafkaRebalanceTimeout != time.Minute {
		t.Fatalf("overrides: %+v %v", c, env.Err())
	}
	env = MapEnv(map[string]string{envKafkaInstanceID: "None"})
	if c = LoadConfig(env, "order", ":8081"); env.Err() != nil || c.KafkaInstanceID != "" {
		t.Fatalf("none: %q %v", c.KafkaInstanceID, env.Err())
	}
	for key, value := range map[string]string{
		envKafkaInstanceID:       "order/a",
		envKafkaSessionTimeout:   "5s",
		envKafkaRebalanceTimeout: "-1s",
	} {
		env := MapEnv(map[string]string{key: value})
		LoadConfig(env, "order", ":8081")
		if err := env.Err(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%s: %v", key, value, err)
		}
	}
}
