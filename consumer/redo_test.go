package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The redo child is this test binary run again with these variables set: a consumer
// that handles the topic until it is killed.
const (
	redoChildEnv = "CHOREO_REDO_CHILD"
	redoSpecEnv  = "CHOREO_REDO_SPEC" // brokers|dsn|topic|dlq|group|commit interval
)

// TestRedoChild is the child process of TestRedoWindowAfterKill; alone it does nothing.
func TestRedoChild(t *testing.T) {
	if os.Getenv(redoChildEnv) != "1" {
		return
	}
	spec := strings.Split(os.Getenv(redoSpecEnv), "|")
	brokers, dsn, topic, dlq, group := strings.Split(spec[0], ","), spec[1], spec[2], spec[3], spec[4]
	interval, err := time.ParseDuration(spec[5])
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	h, err := Standard(StandardConfig{DB: pool, DeadLetter: newProducer(t, brokers), Name: "seq", Handler: applySeq,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(brokers, group, []string{topic}, h, WithCommitInterval(interval), WithDeadLetterTopics(func(string) string { return dlq }),
		WithLogger(slog.New(slog.DiscardHandler)), WithClientOptions(kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			// A short session, so that the successor does not wait long for the dead
			// member to leave the group.
			kgo.HeartbeatInterval(100*time.Millisecond), kgo.SessionTimeout(6*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Run(context.Background()) // until SIGKILL
}

// TestRedoWindowAfterKill measures the crash redo window: a consumer process is killed
// with SIGKILL halfway through a backlog, and a successor in the same group counts the
// records it is handed that were already handled (Idempotent's duplicates). It does so
// with DefaultCommitInterval and, when CHOREO_REDO_COMPARE is set, with franz-go's
// default interval (5 s) for comparison. The counts are logged (see
// docs/reliability.md); the assertion is that every event still has exactly one effect.
func TestRedoWindowAfterKill(t *testing.T) {
	if os.Getenv(redoChildEnv) == "1" {
		return
	}
	intervals := []time.Duration{DefaultCommitInterval}
	if os.Getenv("CHOREO_REDO_COMPARE") != "" {
		intervals = append(intervals, 5*time.Second)
	}
	for _, interval := range intervals {
		t.Run(interval.String(), func(t *testing.T) {
			const records = 600
			e := newChainEnv(t, 1)
			dsn := e.pool.Config().ConnString()
			ks := keys(20)
			produce(t, e.producer, seqEvents(t, e.topic, ks, records/len(ks))...)

			cmd := exec.Command(os.Args[0], "-test.run=^TestRedoChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), redoChildEnv+"=1",
				redoSpecEnv+"="+strings.Join([]string{strings.Join(e.brokers, ","), dsn, e.topic, e.dlq, e.group, interval.String()}, "|"))
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the child to handle half the backlog", func() bool { return e.effects(t) >= records/2 })
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			before := e.effects(t)

			var dups atomic.Int64
			h := e.standard(t, StandardConfig{})
			counted := func(ctx context.Context, m *Message) error {
				err := h(ctx, m)
				if m.Outcome == OutcomeDuplicate {
					dups.Add(1)
				}
				return err
			}
			start(t, e.consumer(t, counted))
			waitFor(t, "the successor to finish the backlog", func() bool { return e.effects(t) == records })
			if n := count(t, e.pool, `SELECT count(*) FROM (SELECT event_id FROM effects GROUP BY event_id HAVING count(*) > 1) d`); n != 0 {
				t.Errorf("%d events with more than one effect", n)
			}
			t.Logf("commit interval %v: killed after %d of %d records; the successor redid %d (%s)",
				interval, before, records, dups.Load(), fmt.Sprintf("%.1f%% of the handled", 100*float64(dups.Load())/float64(before)))
		})
	}
}
