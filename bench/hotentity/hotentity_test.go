package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
)

// TestMain lets the test binary be a child pipeline process too, as the program is for
// -processes (childPipelines runs os.Args[0] with childEnv set).
func TestMain(m *testing.M) {
	if runAsChild() {
		return
	}
	os.Exit(m.Run())
}

func TestGenWorkloadDuplicates(t *testing.T) {
	const n, accounts, dup = 20_000, 1000, 0.05
	w, err := genWorkload(n, accounts, dup, 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.events) != n {
		t.Fatalf("%d events, want %d", len(w.events), n)
	}
	if want := n - int(math.Round(n*dup)); w.unique != want {
		t.Errorf("%d unique events, want %d", w.unique, want)
	}
	// Every duplicate is an exact copy of an event seen earlier; the balances are the
	// sums over the first occurrences only.
	first := map[string]event.Event{}
	sums := map[string]int64{}
	perAccount := map[string]int{}
	for i, ev := range w.events {
		if orig, seen := first[ev.ID]; seen {
			if ev.Subject != orig.Subject || string(ev.Data) != string(orig.Data) || !ev.Time.Equal(orig.Time) {
				t.Fatalf("event %d: duplicate of %s differs from its original", i, ev.ID)
			}
			continue
		}
		first[ev.ID] = ev
		var c credit
		if err := ev.DecodeData(&c); err != nil {
			t.Fatal(err)
		}
		if c.Amount < 1 || c.Amount > 100 {
			t.Errorf("event %d: amount %d outside 1–100", i, c.Amount)
		}
		sums[ev.Subject] += c.Amount
		perAccount[ev.Subject]++
	}
	if len(first) != w.unique {
		t.Errorf("%d distinct ids, unique says %d", len(first), w.unique)
	}
	for acct, s := range sums {
		if w.balance[acct] != s {
			t.Errorf("balance[%s] = %d, want %d", acct, w.balance[acct], s)
		}
	}
	// Keys are uniform over the accounts: all of them used, none far from the mean (19
	// per account; a binomial's 6 standard deviations are about ±26).
	if len(perAccount) != accounts {
		t.Errorf("%d accounts used, want all %d", len(perAccount), accounts)
	}
	mean := float64(w.unique) / accounts
	for acct, k := range perAccount {
		if math.Abs(float64(k)-mean) > 6*math.Sqrt(mean) {
			t.Errorf("account %s has %d events, mean %.1f: not uniform", acct, k, mean)
		}
		if !strings.HasPrefix(acct, "acct-") {
			t.Errorf("account %q: want the acct-N names pgbench's script uses", acct)
		}
	}
	if w.events[0].ID != first[w.events[0].ID].ID {
		t.Error("the first event must be an original")
	}
}

func TestGenWorkloadDeterministicAndValidated(t *testing.T) {
	a, err := genWorkload(500, 10, 0.2, 3)
	if err != nil {
		t.Fatal(err)
	}
	b, err := genWorkload(500, 10, 0.2, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.events {
		if a.events[i].Subject != b.events[i].Subject || string(a.events[i].Data) != string(b.events[i].Data) {
			t.Fatalf("event %d differs between two workloads of one seed", i)
		}
	}
	if one, err := genWorkload(1, 5, 0.5, 1); err != nil || one.unique != 1 {
		t.Errorf("one event at dup 0.5: unique %d, err %v; want the lone event an original", one.unique, err)
	}
	for _, bad := range [][3]float64{{0, 10, 0}, {10, 0, 0}, {10, 10, 1}, {10, 10, -0.1}} {
		if _, err := genWorkload(int(bad[0]), int(bad[1]), bad[2], 1); err == nil {
			t.Errorf("genWorkload(%v) = nil error", bad)
		}
	}
}

// check must fail when a balance is wrong, an output record is missing or doubled, or a
// record was dead-lettered.
func TestCheckDetectsViolations(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	w, err := genWorkload(20, 3, 0.1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := setupSchema(ctx, pool, 3); err != nil {
		t.Fatal(err)
	}
	brokers := testenv.Kafka(t)
	in, out := testenv.Topic(t, brokers, 2), testenv.Topic(t, brokers, 2)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, consumer.DeadLetterTopic(in)); err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	// Correct balances, but only the first unique event relayed, twice.
	for acct, bal := range w.balance {
		if _, err := pool.Exec(ctx, `UPDATE accounts SET balance = $2 WHERE id = $1`, acct, bal); err != nil {
			t.Fatal(err)
		}
	}
	next, err := event.New("test", "account.credited", w.events[0].Subject, credit{Amount: 1})
	if err != nil {
		t.Fatal(err)
	}
	r1, _ := event.ToRecord(out, next.CausedBy(w.events[0]))
	r2, _ := event.ToRecord(out, next.CausedBy(w.events[0]))
	dead := &kgo.Record{Topic: consumer.DeadLetterTopic(in), Value: []byte("x")}
	if err := cl.ProduceSync(ctx, r1, r2, dead).FirstErr(); err != nil {
		t.Fatal(err)
	}
	err = check(ctx, pool, brokers, in, out, w)
	if err == nil {
		t.Fatal("check passed with a missing output, a doubled output and a dead letter")
	}
	for _, want := range []string{"17 input events with no output record", "1 input events with more than one output record", "dead-lettered"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("check error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "balance") {
		t.Errorf("check reports a balance although all are right:\n%v", err)
	}
	if _, err := pool.Exec(ctx, `UPDATE accounts SET balance = balance + 1 WHERE id = $1`, w.events[0].Subject); err != nil {
		t.Fatal(err)
	}
	if err := check(ctx, pool, brokers, in, out, w); err == nil || !strings.Contains(err.Error(), "balance") {
		t.Errorf("check error = %v, want a wrong balance reported", err)
	}
}

// Every mode end to end on a tiny workload: run fails unless each mode's correctness
// check passes.
func TestSmokeAllModes(t *testing.T) {
	if err := benchutil.RequirePgbench(); err != nil {
		t.Fatalf("%v (install postgresql-client)", err)
	}
	jsonPath := filepath.Join(t.TempDir(), "results.json")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := run(ctx, config{
		pg: testenv.PostgresDSN(t), redis: testenv.RedisAddr(t),
		events: 200, partitions: 4, accounts: 20, dup: 0.05, batches: []int{8}, atCommit: true, signed: true, unfenced: true, processes: []int{1, 2},
		repeat: 1, pgbenchT: time.Second, seed: 1, jsonOut: jsonPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Modes) != 12 || r.UniqueEvents != 190 {
		t.Fatalf("%d rows, %d unique events; want pgbench + 11 modes, 190", len(r.Modes), r.UniqueEvents)
	}
	for _, m := range r.Modes {
		if m.EventsPerSec <= 0 || m.EventsPerTx < 1 {
			t.Errorf("%s: %.1f events/s, %.1f events/tx", m.Mode, m.EventsPerSec, m.EventsPerTx)
		}
	}
	// Postgres runs on this machine in the tests, so its backends' CPU is read: never
	// negative, and above zero over the modes together (one mode of this tiny workload,
	// batch=8's ~25 transactions, can take less than the 10 ms clock tick /proc counts
	// in). Every pipeline relays at least one row per round.
	var pgCPU float64
	for _, m := range r.Modes[1:] {
		pgCPU += m.CPUPostgresUS
		if m.CPUPostgresUS < 0 || m.RelayRowsPerRound < 1 {
			t.Errorf("%s: Postgres CPU %.1f µs/event, %.1f relay rows/round", m.Mode, m.CPUPostgresUS, m.RelayRowsPerRound)
		}
	}
	if pgCPU <= 0 {
		t.Errorf("no Postgres backend CPU read for any mode")
	}
	// The floor and choreo split over child processes: each result was checked like any
	// mode's, and the two-process rows are compared with the one-process ones.
	for _, m := range r.Modes[8:] {
		if m.Processes == 0 || (m.Processes == 2) != (m.VsOneProcess > 0) {
			t.Errorf("%s: %d processes, %.2f× one process", m.Mode, m.Processes, m.VsOneProcess)
		}
	}
	if r.Modes[1].VsFloor != 1 {
		t.Errorf("the hand-written row's ratio to itself is %v", r.Modes[1].VsFloor)
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]report
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc["hotentity"]; len(got.Modes) != 12 || got.Events != 200 {
		t.Errorf("JSON %s: want {\"hotentity\": ...} with 12 modes of 200 events", data)
	}
}

// TestSmokePaced runs the floor and choreo, in this process and split over two child
// processes, on an input fed while each mode runs (-rate): every mode's result is checked
// as for a preloaded input (balances, one output record per unique event, nothing
// dead-lettered).
func TestSmokePaced(t *testing.T) {
	if err := benchutil.RequirePgbench(); err != nil {
		t.Fatalf("%v (install postgresql-client)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := run(ctx, config{
		pg: testenv.PostgresDSN(t), redis: testenv.RedisAddr(t),
		events: 200, partitions: 4, accounts: 20, dup: 0.05, processes: []int{2}, rate: 400,
		repeat: 1, pgbenchT: time.Second, seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Modes) != 5 || r.Rate != 400 {
		t.Fatalf("%d rows, rate %d; want pgbench + 4 modes, 400", len(r.Modes), r.Rate)
	}
	for _, m := range r.Modes[1:] {
		if m.EventsPerSec <= 0 || m.CPUMachineUS <= 0 {
			t.Errorf("%s: %.1f events/s, %.1f µs machine CPU/event", m.Mode, m.EventsPerSec, m.CPUMachineUS)
		}
	}
}
