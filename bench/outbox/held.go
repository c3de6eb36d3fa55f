package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/outbox"
)

// heldRounds measures commit→ack latency (woken in-process) while a REPEATABLE READ
// snapshot, taken before c.held rows were inserted and deleted, keeps their index entries
// and every row the relay deletes during the runs: with the relay's default read floor
// (moved every second) and with every read starting from the table's first row
// (WithFloorInterval(0)), alternated twice so both see the table grow.
func heldRounds(ctx context.Context, pool *pgxpool.Pool, brokers []string, s sample, c config, add func(...string)) error {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil { // takes the snapshot
		return err
	}
	if _, err := pool.Exec(ctx, "INSERT INTO choreo_outbox (topic, key, headers, payload) SELECT $1, 'order-' || (g % 1024), $2::jsonb, $3 FROM generate_series(1, $4) g",
		topic, s.headers, s.payload, c.held); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "DELETE FROM choreo_outbox"); err != nil {
		return err
	}
	variants := []struct {
		name string
		opts []outbox.RelayOption
	}{
		{"reads from the first row (WithFloorInterval(0))", []outbox.RelayOption{outbox.WithFloorInterval(0)}},
		{fmt.Sprintf("reads past the floor, moved every %v (default)", outbox.DefaultFloorInterval), nil},
	}
	p99 := make([][]float64, len(variants))
	for round := range 2 {
		for i, v := range variants {
			res, err := latencyBench(ctx, pool, brokers, c, "inprocess", v.opts...)
			if err != nil {
				return fmt.Errorf("held snapshot, %s: %w", v.name, err)
			}
			dead, err := deadRows(ctx, pool)
			if err != nil {
				return err
			}
			p99[i] = append(p99[i], float64(res.p99)/float64(time.Millisecond))
			add("held snapshot", fmt.Sprintf("commit→ack at %d events/s, round %d, %s", c.rate, round+1, v.name),
				fmt.Sprintf("p50 %s  p99 %s  max %s", ms(res.p50), ms(res.p99), ms(res.max)),
				fmt.Sprintf("%.0f/s achieved, %.1f rows/batch; %d deleted rows kept after it", res.achieved, res.perBatch, dead))
		}
	}
	add("held snapshot", "p99 from the first row ÷ p99 past the floor (medians of the rounds)",
		fmt.Sprintf("%.2f", median(p99[0])/median(p99[1])), "the mechanism is kept if ≥ 1.1")
	return nil
}

// deadRows is the outbox table's count of dead rows (vacuum cannot remove them while the
// snapshot is held), from the statistics.
func deadRows(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'choreo_outbox'").Scan(&n)
	return n, err
}
