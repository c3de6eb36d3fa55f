package consumer

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/testenv"
)

// A member that owns more partitions than its Postgres pool has connections says so once,
// at Warn, naming both numbers; one whose pool is large enough says nothing.
func TestStandardWarnsWhenPoolSmallerThanAssignment(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxConns int32
		warn     bool
	}{
		{"too small", 2, true},
		{"large enough", 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = tc.maxConns
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			migrateTestDB(t, pool)

			brokers := testenv.Kafka(t)
			topic := testenv.Topic(t, brokers, 4)
			producer := newProducer(t, brokers)
			h, err := Standard(StandardConfig{DB: pool, Handler: applySeq, DeadLetter: producer})
			if err != nil {
				t.Fatal(err)
			}
			logs := &logRecorder{}
			c, err := New(brokers, testenv.Name(t, "g"), []string{topic}, h, fastGroup(), WithLogger(slog.New(logs)))
			if err != nil {
				t.Fatal(err)
			}
			r := start(t, c)
			recs := seqEvents(t, topic, keys(8), 2)
			produce(t, producer, recs...)
			waitFor(t, "every record handled", func() bool {
				return count(t, pool, `SELECT count(*) FROM effects`) == len(recs)
			})
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}

			warns := logs.find(msgPoolTooSmall)
			if !tc.warn {
				if len(warns) != 0 {
					t.Fatalf("warned with a pool of %d for 4 partitions: %v", tc.maxConns, warns[0].Message)
				}
				return
			}
			if len(warns) != 1 {
				t.Fatalf("got %d pool warnings, want exactly 1 for one assignment", len(warns))
			}
			w := warns[0]
			if w.Level != slog.LevelWarn {
				t.Errorf("level %v, want Warn", w.Level)
			}
			if got := attrOf(w, "partitions").Int64(); got != 4 {
				t.Errorf("partitions = %d, want 4", got)
			}
			if got := attrOf(w, "pool_max_conns").Int64(); got != int64(tc.maxConns) {
				t.Errorf("pool_max_conns = %d, want %d", got, tc.maxConns)
			}
		})
	}
}
