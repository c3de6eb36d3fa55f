package idempotency_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/idempotency"
)

// recordingExecer passes statements to a real pool and records how many
// rows each one affected.
type recordingExecer struct {
	pool *pgxpool.Pool
	mu   sync.Mutex
	rows []int64
}

func (r *recordingExecer) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := r.pool.Exec(ctx, sql, args...)
	if err == nil {
		r.mu.Lock()
		r.rows = append(r.rows, tag.RowsAffected())
		r.mu.Unlock()
	}
	return tag, err
}

// seed inserts expired and live records directly.
func seed(t *testing.T, pool *pgxpool.Pool, expired, live int) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		INSERT INTO choreo_idempotency (scope, key, request_hash, expires_at)
		SELECT 'old', 'k' || i, '\x00', now() - interval '1 hour' FROM generate_series(1, $1) AS i;
	`, expired)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(context.Background(), `
		INSERT INTO choreo_idempotency (scope, key, request_hash, expires_at)
		SELECT 'live', 'k' || i, '\x00', now() + interval '1 hour' FROM generate_series(1, $1) AS i;
	`, live)
	if err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, scope string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM choreo_idempotency WHERE scope = $1`, scope).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSweepOnceDeletesExpiredInBoundedBatches(t *testing.T) {
	tests := []struct {
		name        string
		expired     int
		batch       int
		wantBatches []int64
	}{
		{"nothing to do", 0, 100, []int64{0}},
		{"one short batch", 40, 100, []int64{40}},
		{"exact multiple ends with an empty batch", 200, 100, []int64{100, 100, 0}},
		{"several batches", 250, 100, []int64{100, 100, 50}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := setup(t)
			seed(t, pool, tt.expired, 30)
			rec := &recordingExecer{pool: pool}
			n, err := newSweeper(t, rec, idempotency.WithBatchSize(tt.batch)).SweepOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(tt.expired) {
				t.Fatalf("deleted %d, want %d", n, tt.expired)
			}
			if !slices.Equal(rec.rows, tt.wantBatches) {
				t.Fatalf("rows per statement = %v, want %v", rec.rows, tt.wantBatches)
			}
			if got := count(t, pool, "old"); got != 0 {
				t.Fatalf("%d expired records left", got)
			}
			if got := count(t, pool, "live"); got != 30 {
				t.Fatalf("%d live records left, want 30", got)
			}
		})
	}
}

func TestConcurrentSweepersShareTheWork(t *testing.T) {
	pool := setup(t)
	seed(t, pool, 500, 10)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int64
	)
	for range 3 {
		wg.Go(func() {
			n, err := newSweeper(t, pool, idempotency.WithBatchSize(50)).SweepOnce(context.Background())
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if total != 500 || count(t, pool, "old") != 0 || count(t, pool, "live") != 10 {
		t.Fatalf("deleted %d in total, %d expired and %d live left; want 500, 0, 10",
			total, count(t, pool, "old"), count(t, pool, "live"))
	}
}

func TestSweeperRun(t *testing.T) {
	pool := setup(t)
	seed(t, pool, 120, 5)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sweeps := make(chan int64, 100)
	s := newSweeper(t, pool,
		idempotency.WithBatchSize(50),
		idempotency.WithSweepInterval(time.Millisecond),
		idempotency.WithSweepHook(func(n int64, err error) {
			if err != nil {
				t.Error(err)
			}
			select {
			case sweeps <- n:
			default:
			}
		}))
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	if first := <-sweeps; first != 120 {
		t.Fatalf("first sweep deleted %d, want 120", first)
	}
	// Records that expire later are picked up by a later sweep.
	seed(t, pool, 7, 0)
	for n := range sweeps {
		if n == 7 {
			break
		}
		if n != 0 {
			t.Fatalf("sweep deleted %d, want 0 or 7", n)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
	if count(t, pool, "live") != 5 {
		t.Fatal("Run deleted live records")
	}
}
