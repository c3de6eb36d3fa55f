package procstat_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/internal/procstat"
	"github.com/choreo-saga/choreo/internal/testenv"
)

// CPU of this process grows while it spins.
func TestCPU(t *testing.T) {
	pid := os.Getpid()
	before, err := procstat.CPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	var after time.Duration
	for deadline := time.Now().Add(10 * time.Second); after <= before && time.Now().Before(deadline); {
		for i := 0; i < 1e7; i++ {
			_ = i * i
		}
		if after, err = procstat.CPU(pid); err != nil {
			t.Fatal(err)
		}
	}
	if after <= before {
		t.Fatalf("CPU did not grow: %v then %v", before, after)
	}
	if _, err := procstat.CPU(-1); err == nil {
		t.Error("CPU(-1): no error")
	}
}

// ContextSwitches of this process grow when its threads block: each sleep parks one.
func TestContextSwitches(t *testing.T) {
	pid := os.Getpid()
	before, err := procstat.ContextSwitches(pid)
	if err != nil {
		t.Fatal(err)
	}
	if before <= 0 {
		t.Fatalf("a running process has %d context switches", before)
	}
	for range 20 {
		time.Sleep(time.Millisecond)
	}
	after, err := procstat.ContextSwitches(pid)
	if err != nil {
		t.Fatal(err)
	}
	if after < before+20 {
		t.Errorf("20 sleeps: context switches %d then %d", before, after)
	}
	if _, err := procstat.ContextSwitches(-1); err == nil {
		t.Error("ContextSwitches(-1): no error")
	}
}

// PostgresBackends lists the pool's own backend, whose CPU is readable on this machine.
func TestPostgresBackends(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	own := int(conn.Conn().PgConn().PID())
	pids, err := procstat.PostgresBackends(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, own) {
		t.Fatalf("backends %v lack the pool's own %d", pids, own)
	}
	if _, err := procstat.CPU(own); err != nil {
		t.Errorf("CPU of the backend: %v", err)
	}
}
