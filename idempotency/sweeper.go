package idempotency

import (
	"context"
	"fmt"
	"time"

	"github.com/choreo-saga/choreo/migrate"
)

const (
	// DefaultSweepBatchSize is how many expired records the Sweeper deletes
	// per statement (and per transaction) when no WithBatchSize option is
	// given.
	DefaultSweepBatchSize = 1000

	// DefaultSweepInterval is the pause between sweeps of Sweeper.Run when
	// no WithSweepInterval option is given.
	DefaultSweepInterval = 5 * time.Minute
)

// WithBatchSize sets how many expired records the Sweeper deletes per
// statement. Each batch is its own short transaction, so a large backlog
// never becomes one huge DELETE holding locks and bloating WAL. Default:
// DefaultSweepBatchSize. Must be positive.
func WithBatchSize(n int) Option {
	return func(c *config) error {
		if err := c.sweeperOnly("WithBatchSize"); err != nil {
			return err
		}
		if n <= 0 {
			return fmt.Errorf("%w: batch size %d is not positive", ErrInvalidConfig, n)
		}
		c.batchSize = n
		return nil
	}
}

// WithSweepInterval sets the pause between sweeps of Sweeper.Run. Default:
// DefaultSweepInterval. Must be positive.
func WithSweepInterval(d time.Duration) Option {
	return func(c *config) error {
		if err := c.sweeperOnly("WithSweepInterval"); err != nil {
			return err
		}
		if d <= 0 {
			return fmt.Errorf("%w: sweep interval %v is not positive", ErrInvalidConfig, d)
		}
		c.interval = d
		return nil
	}
}

// WithSweepHook sets a function that Sweeper.Run calls after every sweep
// with the number of records deleted and the error, if any (for logs and
// metrics). Default: none.
func WithSweepHook(fn func(deleted int64, err error)) Option {
	return func(c *config) error {
		if err := c.sweeperOnly("WithSweepHook"); err != nil {
			return err
		}
		if fn == nil {
			return fmt.Errorf("%w: nil sweep hook", ErrInvalidConfig)
		}
		c.onSweep = fn
		return nil
	}
}

// Sweeper deletes expired idempotency records in bounded batches. Several
// Sweepers (one per service instance) may run against one table at once:
// each batch skips rows another sweeper or a claim has locked.
type Sweeper struct {
	db        migrate.Execer
	batchSize int
	interval  time.Duration
	onSweep   func(int64, error)
	sql       string
}

// NewSweeper returns a Sweeper over db, usually a *pgxpool.Pool. It accepts
// WithTable, WithBatchSize, WithSweepInterval and WithSweepHook; an invalid
// option is an error wrapping ErrInvalidConfig, like NewStore's.
func NewSweeper(db migrate.Execer, opts ...Option) (*Sweeper, error) {
	cfg, err := newConfig(true, opts)
	if err != nil {
		return nil, err
	}
	t := cfg.table.Quoted()
	return &Sweeper{
		db:        db,
		batchSize: cfg.batchSize,
		interval:  cfg.interval,
		onSweep:   cfg.onSweep,
		// The LIMIT bounds the batch; the index on expires_at finds the rows;
		// SKIP LOCKED lets concurrent sweepers and claims taking over an
		// expired key proceed without waiting for each other.
		sql: `DELETE FROM ` + t + ` AS d USING (
    SELECT scope, key FROM ` + t + `
    WHERE expires_at <= now()
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
) AS x
WHERE d.scope = x.scope AND d.key = x.key`,
	}, nil
}

// SweepOnce deletes expired records, one batch per statement, until a batch
// comes back short of the batch size or ctx is done. It returns the number
// of records deleted.
func (s *Sweeper) SweepOnce(ctx context.Context) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("idempotency: sweep: %w", err)
		}
		tag, err := s.db.Exec(ctx, s.sql, s.batchSize)
		if err != nil {
			return total, fmt.Errorf("idempotency: sweep: %w", err)
		}
		n := tag.RowsAffected()
		total += n
		if n < int64(s.batchSize) {
			return total, nil
		}
	}
}

// Run sweeps at once and then every interval until ctx is done; it returns
// nil when ctx is cancelled. A failed sweep is reported to the sweep hook
// and retried at the next interval; it does not stop Run.
func (s *Sweeper) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := s.SweepOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if s.onSweep != nil {
			s.onSweep(n, err)
		}
		t.Reset(s.interval)
	}
}
