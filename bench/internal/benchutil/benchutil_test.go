package benchutil

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/internal/testenv"
)

func TestDefaults(t *testing.T) {
	t.Setenv("CHOREO_TEST_POSTGRES_DSN", "")
	t.Setenv("CHOREO_TEST_REDIS_ADDR", "")
	if got := DefaultPostgresDSN(); got != defaultPostgresDSN {
		t.Errorf("DefaultPostgresDSN() = %q with the variable empty, want %q", got, defaultPostgresDSN)
	}
	if got := DefaultRedisAddr(); got != defaultRedisAddr {
		t.Errorf("DefaultRedisAddr() = %q with the variable empty, want %q", got, defaultRedisAddr)
	}
	t.Setenv("CHOREO_TEST_POSTGRES_DSN", "postgres://u@db:5433/x")
	t.Setenv("CHOREO_TEST_REDIS_ADDR", "cache:6380")
	if got := DefaultPostgresDSN(); got != "postgres://u@db:5433/x" {
		t.Errorf("DefaultPostgresDSN() = %q, want the variable's value", got)
	}
	if got := DefaultRedisAddr(); got != "cache:6380" {
		t.Errorf("DefaultRedisAddr() = %q, want the variable's value", got)
	}
}

func TestWithDatabase(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://postgres@127.0.0.1:5432/postgres", "postgres://postgres@127.0.0.1:5432/b?sslmode=disable"},
		{"postgres://postgres@h/postgres?sslmode=require&application_name=a", "postgres://postgres@h/b?application_name=a&sslmode=require"},
		{"host=h user=postgres", "host=h user=postgres dbname=b sslmode=disable"},
		{"host=h sslmode=prefer", "host=h sslmode=prefer dbname=b"},
	} {
		if got := withDatabase(tc.in, "b"); got != tc.want {
			t.Errorf("withDatabase(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCreateDB(t *testing.T) {
	ctx := context.Background()
	admin := testenv.PostgresDSN(t)
	dsn, drop, err := CreateDB(ctx, admin, "choreo_benchutil")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to the new database: %v", err)
	}
	var name string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(name, "choreo_benchutil_") {
		t.Errorf("database %q, want the prefix choreo_benchutil_", name)
	}
	// drop must succeed with a session still open on the database (WITH (FORCE)).
	if err := drop(); err != nil {
		t.Fatalf("drop: %v", err)
	}
	conn.Close(ctx)
	a, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	var exists bool
	if err := a.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("database %s still exists after drop", name)
	}
}

func needPgbench(t *testing.T) {
	t.Helper()
	if err := RequirePgbench(); err != nil {
		t.Fatalf("%v\n  pgbench ships with the Postgres client packages on these machines: install postgresql-client", err)
	}
}

func TestPgbenchDuration(t *testing.T) {
	needPgbench(t)
	dsn := testenv.PostgresDSN(t)
	r, err := Pgbench{DSN: dsn, Script: "SELECT 1;\n", Clients: 2, Duration: time.Second, Latencies: true}.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.TPS <= 0 || r.Transactions <= 0 {
		t.Fatalf("tps %v, transactions %d: want both positive", r.TPS, r.Transactions)
	}
	if len(r.Latencies) != r.Transactions {
		t.Errorf("%d latencies for %d transactions: -l logs every transaction", len(r.Latencies), r.Transactions)
	}
	if !slices.IsSorted(r.Latencies) || r.Latencies[len(r.Latencies)-1] <= 0 {
		t.Errorf("latencies not sorted ascending, or all zero: %v … %v", r.Latencies[0], r.Latencies[len(r.Latencies)-1])
	}
	if r.CPU.Process <= 0 || r.CPU.Machine <= 0 {
		t.Errorf("CPU %+v: pgbench ran %d transactions, want both figures positive", r.CPU, r.Transactions)
	}
}

func TestPgbenchTransactionsAndOptions(t *testing.T) {
	needPgbench(t)
	dsn := testenv.PostgresDSN(t)
	// Divides by zero unless PGOPTIONS reached the sessions.
	script := "SELECT 1 / (current_setting('synchronous_commit') = 'off')::int;\n"
	r, err := Pgbench{DSN: dsn, Script: script, Clients: 3, Transactions: 5, QueryMode: "simple",
		PGOptions: "-c synchronous_commit=off"}.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Transactions != 15 {
		t.Errorf("%d transactions, want 3 clients × 5", r.Transactions)
	}
	if r.Latencies != nil {
		t.Errorf("%d latencies without Latencies set", len(r.Latencies))
	}
	_, err = Pgbench{DSN: dsn, Script: script, Transactions: 1}.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "division by zero") {
		t.Errorf("without PGOptions: err = %v, want pgbench's output naming the division by zero", err)
	}
}

func TestPgbenchBadScript(t *testing.T) {
	needPgbench(t)
	_, err := Pgbench{DSN: testenv.PostgresDSN(t), Script: "SELECT * FROM no_such_table;\n", Transactions: 1}.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no_such_table") {
		t.Errorf("err = %v, want pgbench's output naming the missing table", err)
	}
}

func TestPercentile(t *testing.T) {
	var hundred []time.Duration
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{nil, 0.5, 0},
		{[]time.Duration{7}, 0.99, 7},
		{[]time.Duration{1, 2, 3, 4}, 0.5, 3},
		{hundred, 0, time.Millisecond},
		{hundred, 0.5, 51 * time.Millisecond},
		{hundred, 0.99, 100 * time.Millisecond},
		{hundred, 1, 100 * time.Millisecond},
		{hundred[:10], 0.99, 10 * time.Millisecond},
	} {
		if got := Percentile(tc.sorted, tc.p); got != tc.want {
			t.Errorf("Percentile(%d samples, %v) = %v, want %v", len(tc.sorted), tc.p, got, tc.want)
		}
	}
}

func TestSampleCPU(t *testing.T) {
	before, err := SampleCPU()
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until this process has used 50ms of it.
	var after CPUTime
	x := 1
	for after.Sub(before).Process < 50*time.Millisecond {
		for i := range 1_000_000 {
			x = x*31 + i
		}
		if after, err = SampleCPU(); err != nil {
			t.Fatal(err)
		}
	}
	_ = x
	// The machine's counter ticks every 10ms and counts this process's CPU too.
	if d := after.Sub(before); d.Machine <= 0 {
		t.Errorf("machine busy time %v after this process used %v", d.Machine, d.Process)
	}
}

func TestCPUTimePer(t *testing.T) {
	c := CPUTime{Machine: 10 * time.Millisecond, Process: 4 * time.Millisecond}
	if got, want := c.Per(4), (CPUTime{Machine: 2500 * time.Microsecond, Process: time.Millisecond}); got != want {
		t.Errorf("Per(4) = %+v, want %+v", got, want)
	}
	if got := c.Per(0); got != (CPUTime{}) {
		t.Errorf("Per(0) = %+v, want zero", got)
	}
}

func TestParseInts(t *testing.T) {
	got, err := ParseInts(" 0, 16 ,32", 0)
	if err != nil || !slices.Equal(got, []int{0, 16, 32}) {
		t.Errorf("ParseInts = %v, %v; want [0 16 32]", got, err)
	}
	for _, bad := range []string{"", "1,,2", "1,x", "0,8"} {
		if got, err := ParseInts(bad, 1); err == nil {
			t.Errorf("ParseInts(%q, 1) = %v, want an error", bad, got)
		}
	}
}
