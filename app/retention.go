package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/internal/retention"
	"github.com/choreo-saga/choreo/migrate"
)

// Names of the retention variables of [LoadConfig].
const (
	envIdempotencyRetention = "IDEMPOTENCY_RETENTION"
	envDeadLetterRetention  = "DEAD_LETTER_RETENTION"
)

// Defaults of the retention settings.
const (
	// defaultIdempotencyRetention is how long an idempotency record guards its key
	// (idempotency.DefaultRetention, 7 days: Kafka's default log retention, so a
	// redelivery or a dead-letter replay of any record the broker still holds is a
	// dedupe hit).
	defaultIdempotencyRetention = idempotency.DefaultRetention
	// defaultDeadLetterRetention is how long a row of the dead-letter archive (a record
	// the dead-letter topic refused whole) is kept: 30 days, for an operator to replay it.
	defaultDeadLetterRetention = 30 * 24 * time.Hour
	// defaultDeadLetterPruneInterval is how often the App deletes expired archive rows
	// at most (see retention.Interval).
	defaultDeadLetterPruneInterval = time.Hour
	// deadLetterPruneBatch bounds the rows one DELETE removes.
	deadLetterPruneBatch = 1000
)

// readRetention reads the retention variables into c.
func (c *Config) readRetention(env *Env) {
	c.IdempotencyRetention = env.Duration(envIdempotencyRetention, defaultIdempotencyRetention)
	c.DeadLetterRetention = env.Duration(envDeadLetterRetention, defaultDeadLetterRetention)
}

func (c Config) retentionProblems() []problem {
	var ps []problem
	if c.IdempotencyRetention < 0 {
		ps = append(ps, problem{envIdempotencyRetention, "must not be negative"})
	}
	if c.DeadLetterRetention < 0 {
		ps = append(ps, problem{envDeadLetterRetention, "must not be negative"})
	}
	return ps
}

// idempotencyRetention returns the configured retention, or the default for 0.
func (c Config) idempotencyRetention() time.Duration {
	if c.IdempotencyRetention == 0 {
		return defaultIdempotencyRetention
	}
	return c.IdempotencyRetention
}

// pruneDeadLetters deletes the rows of the dead-letter archive table created more than
// retention ago, in batches, and returns how many it deleted. The App runs it every
// retention.Interval(Config.DeadLetterRetention, defaultDeadLetterPruneInterval).
func pruneDeadLetters(ctx context.Context, db migrate.Execer, table string, retention time.Duration) (int64, error) {
	t := pgx.Identifier{table}.Sanitize()
	var total int64
	for {
		tag, err := db.Exec(ctx, `DELETE FROM `+t+` WHERE id IN (SELECT id FROM `+t+
			` WHERE created_at < now() - $1::bigint * interval '1 microsecond' ORDER BY id LIMIT $2)`,
			retention.Microseconds(), deadLetterPruneBatch)
		if err != nil {
			return total, fmt.Errorf("app: prune dead-letter archive %s: %w", table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < deadLetterPruneBatch {
			return total, nil
		}
	}
}

// deadLetterPruner deletes expired archive rows until ctx ends.
func (a *App) deadLetterPruner(ctx context.Context) error {
	keep := a.Config.DeadLetterRetention
	if keep == 0 {
		keep = defaultDeadLetterRetention
	}
	t := time.NewTicker(retention.Interval(keep, defaultDeadLetterPruneInterval))
	defer t.Stop()
	for {
		n, err := pruneDeadLetters(ctx, a.Pool, a.archive.TableName(), keep)
		if err != nil && ctx.Err() == nil {
			a.Logger.Warn("app: pruning the dead-letter archive failed", slog.Any("error", err))
		} else if n > 0 {
			a.Logger.Info("app: pruned the dead-letter archive", slog.Int64("rows", n), slog.Duration("retention", keep))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
