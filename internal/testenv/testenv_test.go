package testenv_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPostgresIsolation: two parallel tests each create the same table and write a row; each
// sees only its own row, proving they run in different databases.
func TestPostgresIsolation(t *testing.T) {
	var mu sync.Mutex
	names := map[string]bool{}
	for _, who := range []string{"a", "b"} {
		t.Run(who, func(t *testing.T) {
			t.Parallel()
			pool := testenv.Postgres(t)
			ctx := context.Background()
			if _, err := pool.Exec(ctx, `CREATE TABLE t (who text)`); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `INSERT INTO t VALUES ($1)`, who); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // overlap with the sibling
			var got []string
			rows, _ := pool.Query(ctx, `SELECT who FROM t`)
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				got = append(got, s)
			}
			if rows.Err() != nil || len(got) != 1 || got[0] != who {
				t.Fatalf("rows = %v (err %v), want just %q", got, rows.Err(), who)
			}
			var db string
			if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if names[db] {
				t.Fatalf("database %s shared", db)
			}
			names[db] = true
		})
	}
}

func TestPostgresDatabaseDropped(t *testing.T) {
	var db string
	t.Run("inner", func(t *testing.T) {
		pool := testenv.Postgres(t)
		if err := pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&db); err != nil {
			t.Fatal(err)
		}
	})
	admin := testenv.Postgres(t)
	var exists bool
	if err := admin.QueryRow(context.Background(), `SELECT exists(SELECT 1 FROM pg_database WHERE datname = $1)`, db).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists || db == "" {
		t.Fatalf("database %q still exists after its test ended", db)
	}
}

func TestRedisIsolation(t *testing.T) {
	var leftover string
	t.Run("group", func(t *testing.T) {
		for _, who := range []string{"a", "b"} {
			t.Run(who, func(t *testing.T) {
				t.Parallel()
				c, ns := testenv.Redis(t)
				ctx := context.Background()
				if err := c.Set(ctx, ns+"k", who, 0).Err(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond)
				if got := c.Get(ctx, ns+"k").Val(); got != who {
					t.Fatalf("got %q, want %q", got, who)
				}
				if who == "a" {
					leftover = ns + "k"
				}
			})
		}
	})
	c, _ := testenv.Redis(t)
	if n := c.Exists(context.Background(), leftover).Val(); n != 0 {
		t.Fatalf("key %s survived its test's cleanup", leftover)
	}
}

func TestKafkaTopicsIsolated(t *testing.T) {
	brokers := testenv.Kafka(t)
	a := testenv.Topic(t, brokers, 3)
	b := testenv.Topic(t, brokers, 1)
	if a == b || !strings.HasPrefix(a, "t-") {
		t.Fatalf("topic names %q %q", a, b)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: a, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	td, err := kadm.NewClient(cl).ListTopics(ctx, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(td[a].Partitions) != 3 || len(td[b].Partitions) != 1 {
		t.Fatalf("partitions: %d and %d", len(td[a].Partitions), len(td[b].Partitions))
	}
	offs, err := kadm.NewClient(cl).ListEndOffsets(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	offs.Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			t.Fatalf("topic %s saw a record produced to %s", b, a)
		}
	})
	// A second test's broker does not know this test's topics.
	t.Run("other", func(t *testing.T) {
		other := testenv.Kafka(t)
		cl2, err := kgo.NewClient(kgo.SeedBrokers(other...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl2.Close()
		td, err := kadm.NewClient(cl2).ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if td.Has(a) && strings.Join(other, ",") != strings.Join(brokers, ",") {
			t.Fatalf("topic %s visible on a different test's cluster", a)
		}
	})
}

func TestNameUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		n := testenv.Name(t, "x")
		if seen[n] || len(n) > 63 {
			t.Fatalf("name %q repeated or too long for a Postgres identifier", n)
		}
		seen[n] = true
	}
}

func TestEmptyKafka(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	brokers := testenv.EmptyKafka(t)
	topic := testenv.Topic(t, brokers, 2)
	// A static member does not leave its group when it closes.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("g"), kgo.InstanceID("static"),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if fs := cl.PollFetches(ctx); fs.NumRecords() != 1 {
		t.Fatalf("fetched %d records, errors %v", fs.NumRecords(), fs.Errors())
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	again := testenv.EmptyKafka(t)
	adm, err := kgo.NewClient(kgo.SeedBrokers(again...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	topics, err := kadm.NewClient(adm).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := kadm.NewClient(adm).ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(topics) != 0 || len(groups) != 0 {
		t.Fatalf("after EmptyKafka: topics %v, groups %v", topics.Names(), groups.Groups())
	}
}
