package batchjob_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/services/internal/batchjob"
)

// Drain repeats batches while they come back full, adds up what they did, and stops at
// the first short batch or error.
func TestDrain(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name      string
		claimed   []int // per call; acted is claimed-1
		fail      int   // 1-based call that fails, 0 for none
		wantCalls int
		wantTotal int
		wantErr   error
	}{
		{name: "short first", claimed: []int{2}, wantCalls: 1, wantTotal: 1},
		{name: "full then short", claimed: []int{3, 3, 1}, wantCalls: 3, wantTotal: 2 + 2 + 0},
		{name: "full then empty", claimed: []int{3, 0}, wantCalls: 2, wantTotal: 2 - 1},
		{name: "error stops", claimed: []int{3, 3, 3}, fail: 2, wantCalls: 2, wantTotal: 2 + 2, wantErr: boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			total, err := batchjob.Drain(context.Background(), 3, func(context.Context) (int, int, error) {
				c := tt.claimed[calls]
				calls++
				if calls == tt.fail {
					return c, c - 1, boom
				}
				return c, c - 1, nil
			})
			if calls != tt.wantCalls || total != tt.wantTotal || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Drain: %d calls, %d, %v; want %d calls, %d, %v", calls, total, err, tt.wantCalls, tt.wantTotal, tt.wantErr)
			}
		})
	}
}

// Paced keeps a fast round's period; a slow one waits paceFactor times its duration, so
// it never takes more than a tenth of the time.
func TestPaced(t *testing.T) {
	for _, c := range []struct{ every, took, want time.Duration }{
		{time.Second, 0, time.Second},
		{time.Second, 100 * time.Millisecond, time.Second},
		{time.Second, 340 * time.Millisecond, 3060 * time.Millisecond},
		{200 * time.Millisecond, 50 * time.Millisecond, 450 * time.Millisecond},
	} {
		got := batchjob.Paced(c.every, c.took)
		if got != c.want {
			t.Errorf("Paced(%v, %v) = %v, want %v", c.every, c.took, got, c.want)
		}
		if share := float64(c.took) / float64(got+c.took); share > 0.1+1e-9 {
			t.Errorf("Paced(%v, %v): the round takes %.2f of the time", c.every, c.took, share)
		}
	}
}

// Repeat runs the first round at once (with an hour's period, a wait would hang the
// test) and starts each next one no sooner than Paced after the end of the last (timers
// never fire early, so the bound holds on a loaded machine); it returns once ctx is
// cancelled without starting another round.
func TestRepeat(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	batchjob.Repeat(ctx, time.Hour, func(context.Context) { calls++; cancel() })
	if calls != 1 {
		t.Fatalf("%d rounds after the cancellation, want 1", calls)
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	var starts, ends []time.Time
	batchjob.Repeat(ctx, time.Millisecond, func(context.Context) {
		starts = append(starts, time.Now())
		time.Sleep(20 * time.Millisecond)
		ends = append(ends, time.Now())
		if len(starts) == 3 {
			cancel()
		}
	})
	if len(starts) != 3 {
		t.Fatalf("%d rounds, want 3", len(starts))
	}
	for i := 1; i < len(starts); i++ {
		last := ends[i-1].Sub(starts[i-1])
		if gap, want := starts[i].Sub(ends[i-1]), batchjob.Paced(time.Millisecond, last); gap < want {
			t.Errorf("round %d started %v after a round of %v, want at least %v", i+1, gap, last, want)
		}
	}
}

// Run logs a failed round and, with Done, a round that did something; a round cut short
// by the cancellation is no failure (what it did is still logged), and Run returns nil
// once ctx is done without starting another round, even when a tick is due as well.
func TestRun(t *testing.T) {
	var buf bytes.Buffer
	logs := batchjob.Logs{Logger: slog.New(slog.NewTextHandler(&buf, nil)), Failed: "job failed", Done: "job done"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := []struct {
		n   int
		err error
	}{{0, nil}, {2, nil}, {1, errors.New("round 3")}, {5, errors.New("round 4")}}
	calls := 0
	err := batchjob.Run(ctx, time.Millisecond, func(context.Context) (int, error) {
		r := results[calls]
		calls++
		if calls == len(results) {
			cancel()
			time.Sleep(5 * time.Millisecond) // the next tick is due too when Run looks again
		}
		return r.n, r.err
	}, logs)
	if err != nil || calls != len(results) {
		t.Fatalf("Run = %v after %d rounds; want nil after %d", err, calls, len(results))
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		i := strings.Index(line, "level=")
		got = append(got, line[i:])
	}
	want := []string{`level=INFO msg="job done" count=2`, `level=WARN msg="job failed" error="round 3"`,
		`level=INFO msg="job done" count=5`}
	if !slices.Equal(got, want) {
		t.Fatalf("logged %q, want %q", got, want)
	}
}

// fixture is a table of checked rows and a Reconciliation over it that corrects the rows
// whose need is set, recording the corrections in fixed.
type fixture struct {
	pool *pgxpool.Pool
	job  batchjob.Reconciliation
}

func newFixture(t *testing.T, rows map[string]bool) *fixture {
	t.Helper()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE jobs (order_id text PRIMARY KEY, need boolean NOT NULL,
		checked boolean NOT NULL DEFAULT false, fixed int NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	for id, need := range rows {
		if _, err := pool.Exec(ctx, `INSERT INTO jobs (order_id, need) VALUES ($1, $2)`, id, need); err != nil {
			t.Fatal(err)
		}
	}
	ob, err := outbox.New()
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{pool: pool}
	f.job = batchjob.Reconciliation{DB: pool, Outbox: ob, Table: "jobs", Size: 3, Name: "test: reconcile",
		Claim: func(ctx context.Context, tx pgx.Tx, limit int) (batchjob.Claimed, error) {
			rows, err := tx.Query(ctx, `SELECT order_id, need FROM jobs WHERE NOT checked
				ORDER BY order_id LIMIT $1 FOR UPDATE SKIP LOCKED`, limit)
			if err != nil {
				return batchjob.Claimed{}, err
			}
			return batchjob.Sort(rows)
		},
		Correct: func(ctx context.Context, tx pgx.Tx, order string) (bool, error) {
			_, err := tx.Exec(ctx, `UPDATE jobs SET fixed = fixed + 1 WHERE order_id = $1`, order)
			return err == nil, err
		},
	}
	return f
}

// state returns each row's checked and fixed columns as "checked/fixed".
func (f *fixture) state(t *testing.T) map[string]string {
	t.Helper()
	rows, err := f.pool.Query(context.Background(), `SELECT order_id, checked, fixed FROM jobs`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var (
		id      string
		checked bool
		fixed   int
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &checked, &fixed}, func() error {
		got[id] = fmt.Sprintf("%t/%d", checked, fixed)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func wantState(t *testing.T, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: checked/fixed %s, want %s (all: %v)", id, got[id], w, got)
		}
	}
}

// Once checks every row once over several batches: the ones that need nothing are marked
// checked, the others corrected once each and marked checked; a second round finds
// nothing.
func TestReconciliationChecksEveryRowOnce(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, map[string]bool{"o-1": true, "o-2": false, "o-3": true, "o-4": false, "o-5": false, "o-6": true, "o-7": true})
	if n, err := f.job.Once(ctx); err != nil || n != 4 {
		t.Fatalf("Once = %d, %v; want 4", n, err)
	}
	if n, err := f.job.Once(ctx); err != nil || n != 0 {
		t.Fatalf("second Once = %d, %v; want 0", n, err)
	}
	wantState(t, f.state(t), map[string]string{"o-1": "true/1", "o-2": "true/0", "o-3": "true/1", "o-4": "true/0",
		"o-5": "true/0", "o-6": "true/1", "o-7": "true/1"})
}

// Committed runs after the claim committed (another connection sees the fine rows
// checked) and before the corrections, and its count is added; a row that another
// instance checked meanwhile is not corrected.
func TestReconciliationCommittedAndCorrectedElsewhere(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, map[string]bool{"o-1": true, "o-2": false, "o-3": true})
	f.job.Size = 10 // one batch
	claim := f.job.Claim
	var seen map[string]string
	f.job.Claim = func(ctx context.Context, tx pgx.Tx, limit int) (batchjob.Claimed, error) {
		c, err := claim(ctx, tx, limit)
		c.Committed = func(ctx context.Context) int {
			seen = f.state(t)
			// Another instance corrects o-3 first.
			if _, err := f.pool.Exec(ctx, `UPDATE jobs SET checked = true WHERE order_id = 'o-3'`); err != nil {
				t.Error(err)
			}
			return 10
		}
		return c, err
	}
	if n, err := f.job.Once(ctx); err != nil || n != 11 {
		t.Fatalf("Once = %d, %v; want 10 from Committed and 1 correction", n, err)
	}
	wantState(t, seen, map[string]string{"o-1": "false/0", "o-2": "true/0", "o-3": "false/0"})
	wantState(t, f.state(t), map[string]string{"o-1": "true/1", "o-2": "true/0", "o-3": "true/0"})
}

// Rows another transaction holds are skipped, not waited for, and checked by a later
// round.
func TestReconciliationSkipsLockedRows(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, map[string]bool{"o-1": true, "o-2": true})
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE order_id = 'o-1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if n, err := f.job.Once(ctx); err != nil || n != 1 {
		t.Fatalf("Once with o-1 locked = %d, %v; want 1", n, err)
	}
	wantState(t, f.state(t), map[string]string{"o-1": "false/0", "o-2": "true/1"})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := f.job.Once(ctx); err != nil || n != 1 {
		t.Fatalf("Once after the release = %d, %v; want 1", n, err)
	}
	wantState(t, f.state(t), map[string]string{"o-1": "true/1", "o-2": "true/1"})
}

// A failed claim changes and reports nothing; a failed correction is rolled back alone
// and stops the round, leaving its row and the later ones unchecked for the next round.
// Errors carry the job's name and the order.
func TestReconciliationFailures(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	t.Run("claim", func(t *testing.T) {
		f := newFixture(t, map[string]bool{"o-1": true, "o-2": false})
		claim := f.job.Claim
		committed := false
		f.job.Claim = func(ctx context.Context, tx pgx.Tx, limit int) (batchjob.Claimed, error) {
			c, _ := claim(ctx, tx, limit)
			c.Committed = func(context.Context) int { committed = true; return 1 }
			return c, boom
		}
		n, err := f.job.Once(ctx)
		if !errors.Is(err, boom) || n != 0 || committed || !strings.HasPrefix(err.Error(), "test: reconcile: ") {
			t.Fatalf("Once = %d, %v (committed %t); want 0, test: reconcile: boom", n, err, committed)
		}
		wantState(t, f.state(t), map[string]string{"o-1": "false/0", "o-2": "false/0"})
	})
	t.Run("correction", func(t *testing.T) {
		f := newFixture(t, map[string]bool{"o-1": false, "o-2": true, "o-3": true, "o-4": true, "o-5": true})
		correct := f.job.Correct
		f.job.Correct = func(ctx context.Context, tx pgx.Tx, order string) (bool, error) {
			if ok, err := correct(ctx, tx, order); err != nil || order != "o-3" {
				return ok, err
			}
			return true, boom // after its write: rolled back
		}
		n, err := f.job.Once(ctx)
		if !errors.Is(err, boom) || n != 1 || err.Error() != "test: reconcile order o-3: boom" {
			t.Fatalf("Once = %d, %v; want 1, test: reconcile order o-3: boom", n, err)
		}
		wantState(t, f.state(t), map[string]string{"o-1": "true/0", "o-2": "true/1", "o-3": "false/0", "o-4": "false/0", "o-5": "false/0"})
		f.job.Correct = correct
		if n, err := f.job.Once(ctx); err != nil || n != 3 {
			t.Fatalf("next Once = %d, %v; want 3", n, err)
		}
		wantState(t, f.state(t), map[string]string{"o-1": "true/0", "o-2": "true/1", "o-3": "true/1", "o-4": "true/1", "o-5": "true/1"})
	})
}
