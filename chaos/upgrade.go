package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/services/events"
)

// V1Release is the commit the upgrade scenario's services start from: the reference
// system before payment.authorized had a version 2 (its order and inventory handle v1
// only, its payment writes v1 only).
const V1Release = "4a00ff227c060ffdff29e9896853560c2f3e534f"

// FaultUpgrade is an instance stopped (SIGTERM) and started again from this tree's
// binaries.
const FaultUpgrade = "upgrade"

// upgradeOrder is the roll: consumers of payment.authorized first, one instance at a
// time, then its producer, whose upgraded instances write v2.
var upgradeOrder = []struct {
	svc string
	i   int
	env []string
}{
	{"order", 0, nil}, {"inventory", 0, nil}, {"order", 1, nil}, {"inventory", 1, nil},
	{"payment", 0, []string{"PAYMENT_AUTHORIZED_VERSION=2"}}, {"payment", 1, []string{"PAYMENT_AUTHORIZED_VERSION=2"}},
}

// BuildRelease builds the three services as they were at commit ref into dir/ref-bin and
// returns that directory. It needs the repository's history (git archive).
func BuildRelease(ctx context.Context, dir, ref string) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	src, bin := filepath.Join(dir, "release-src"), filepath.Join(dir, "release-bin")
	tar := filepath.Join(dir, "release.tar")
	for _, d := range []string{src, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", fmt.Errorf("chaos: %w", err)
		}
	}
	for _, c := range []*exec.Cmd{
		exec.CommandContext(ctx, "git", "-C", root, "archive", "-o", tar, ref),
		exec.CommandContext(ctx, "tar", "-xf", tar, "-C", src),
		exec.CommandContext(ctx, "go", "build", "-o", bin+string(os.PathSeparator), "./services/order", "./services/payment", "./services/inventory"),
	} {
		if c.Args[0] == "go" {
			c.Dir = src
		}
		if out, err := c.CombinedOutput(); err != nil {
			return "", fmt.Errorf("chaos: release %s: %s: %w\n%s (the upgrade scenario builds the previous release from the git history)",
				ref, strings.Join(c.Args[:2], " "), err, out)
		}
	}
	return bin, nil
}

// rollingUpgrade upgrades every service instance from the previous release to this
// tree, one at a time in upgradeOrder, spread over the load; after the first payment
// instance moved to v2 (so that v1 and v2 producers run at once), it kills the payment
// outbox relay leader with -9.
func (r *run) rollingUpgrade(ctx context.Context, c Config) {
	// An upgrade takes about 2 s: the roll ends at about two thirds of the load, so that
	// v2 alone flows for the last third.
	pause := loadDuration(c) / time.Duration(2*len(upgradeOrder)+2)
	for _, st := range upgradeOrder {
		if !sleep(ctx, pause) {
			r.s.logf("upgrade: the load ended before %s-%d; upgrading the rest now", st.svc, st.i+1)
		}
		r.upgrade(ctx, r.s.instances[st.svc][st.i], st.env)
		if st.svc == "payment" && st.i == 0 {
			p, err := r.s.relayLeader(ctx, "payment")
			if err != nil {
				p = r.s.instances["payment"][1]
			}
			r.killInstance(ctx, p, FaultKillLeader, 1500*time.Millisecond)
		}
	}
	r.mu.Lock()
	r.upgraded = time.Now()
	r.mu.Unlock()
}

// upgrade stops p (SIGTERM, graceful) and starts it from this tree's binary with env added.
func (r *run) upgrade(ctx context.Context, p *proc, env []string) {
	start := time.Now()
	p.stop(30 * time.Second)
	svc, _, _ := strings.Cut(p.name, "-")
	p.mu.Lock()
	p.path = filepath.Join(r.s.bins, svc)
	p.env = append(p.env, env...)
	p.mu.Unlock()
	err := r.s.restart(context.WithoutCancel(ctx), p, 90*time.Second)
	detail := "previous release → this tree"
	if len(env) > 0 {
		detail += ", " + strings.Join(env, " ")
	}
	r.record(FaultUpgrade, p.name, detail, start, err)
}

// versionsSeen counts the payment.authorized records on payments.events by schema
// version, and returns an anomaly unless both versions were written (the roll ran v1
// and v2 producers side by side).
func (s *System) versionsSeen(ctx context.Context) (map[string]int, []Anomaly, error) {
	recs, err := s.readTopic(ctx, events.TopicPayments)
	if err != nil {
		return nil, nil, err
	}
	seen := map[string]int{}
	for _, r := range recs {
		ev, err := event.FromRecord(r)
		if err != nil || ev.Type != events.PaymentAuthorized {
			continue
		}
		seen[fmt.Sprintf("%s v%d", ev.Type, max(1, ev.SchemaVersion))]++
	}
	var as []Anomaly
	for _, v := range []int{1, 2} {
		if k := fmt.Sprintf("%s v%d", events.PaymentAuthorized, v); seen[k] == 0 {
			as = append(as, Anomaly{Invariant: InvMixedVersions, Detail: "no " + k + " record was written: the roll did not run both versions"})
		}
	}
	return seen, as, nil
}

// InvMixedVersions: the upgrade scenario wrote payment.authorized at v1 and at v2.
const InvMixedVersions = "v1 and v2 written during the roll"

// startTracker starts `sagactl track` on a database of its own, indexing the saga
// topics (with the reference catalogue's contract check) for the retirement report.
func (s *System) startTracker(ctx context.Context) error {
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	db := "chaos_" + s.id + "_tracker"
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		return fmt.Errorf("chaos: tracker database: %w", err)
	}
	u, err := databaseURL(s.opts.PostgresURL, db)
	if err != nil {
		return err
	}
	s.dbs["tracker"], s.dbURL["tracker"] = db, u
	s.tracker = &proc{name: "tracker", path: filepath.Join(s.bins, "sagactl"), logPath: s.logPath("tracker"),
		args: []string{"track", "-db", u, "-brokers", s.brokers, "-config", filepath.Join(root, "deploy", "tracker", "order.json")}}
	return s.tracker.start()
}

// retirement asks `sagactl contracts usage` whether v1 of payment.authorized can be
// retired, over the window since the roll ended, with this tree's declarations (the
// reference catalogue of its sagactl).
func (s *System) retirement(ctx context.Context, since time.Time) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	window := time.Since(since).Round(time.Second) + time.Second
	out, err := exec.CommandContext(ctx, filepath.Join(s.bins, "sagactl"), "contracts", "usage", "-db", s.dbURL["tracker"],
		"-config", filepath.Join(root, "deploy", "tracker", "order.json"),
		"-window", window.String(), "-retire", events.PaymentAuthorized+"@1").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("chaos: sagactl contracts usage: %w\n%s", err, out)
	}
	return string(out), nil
}
