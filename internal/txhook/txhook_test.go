package txhook_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/internal/txhook"
)

// queuer queues one statement; checked makes it a Checker that asks for it to be sent.
type queuer struct {
	sql     string
	checked bool
}

func (q *queuer) Queue(b *pgx.Batch) { b.Queue(q.sql) }

type checker struct{ queuer }

func (c *checker) Checked() bool { return c.checked }

// Batch sends the statements queued up to a Checker whose Checked is true, its own
// included, in one round trip, and returns the rest; a Checker whose Checked is false is
// an ordinary Queuer.
func TestBatchSendsUpToAChecker(t *testing.T) {
	ctx := context.Background()
	tr := &testenv.RoundTrips{}
	pool := testenv.PostgresWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = tr })
	for _, c := range []struct {
		checked    bool
		sent, rest []string
	}{
		{true, []string{"select; insert"}, []string{"update"}},
		{false, nil, []string{"select", "insert", "update"}},
	} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE t (x int) ON COMMIT DROP`); err != nil {
			t.Fatal(err)
		}
		h := txhook.New(tx)
		h.Hook("a", func() any { return &queuer{sql: `SELECT 1`} })
		h.Hook("b", func() any { return &checker{queuer{sql: `INSERT INTO t VALUES (1)`, checked: c.checked}} })
		h.Hook("c", func() any { return &queuer{sql: `UPDATE t SET x = 2`} })
		tr.Take()
		b, err := h.Batch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sent := tr.Take(); !slices.Equal(sent, c.sent) {
			t.Errorf("checked %v: sent %q, want %q", c.checked, sent, c.sent)
		}
		var rest []string
		for _, q := range b.QueuedQueries {
			rest = append(rest, map[string]string{`SELECT 1`: "select", `INSERT INTO t VALUES (1)`: "insert", `UPDATE t SET x = 2`: "update"}[q.SQL])
		}
		if !slices.Equal(rest, c.rest) {
			t.Errorf("checked %v: returned %q, want %q", c.checked, rest, c.rest)
		}
		_ = tx.Rollback(ctx)
	}
}
