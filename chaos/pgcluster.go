package chaos

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// pgCluster is a Postgres cluster of the suite's own, made with Debian's
// pg_createcluster on a free port, so that a scenario can crash and restart a whole
// Postgres server without touching the shared one. It needs the postgresql-common tools
// and the rights to run them (root or the postgres user).
type pgCluster struct {
	version, name string
	port          int
}

// createCluster creates and starts a cluster with trust authentication on a free port.
func createCluster(ctx context.Context, id string) (*pgCluster, error) {
	out, err := exec.CommandContext(ctx, "pg_lsclusters", "-h").Output()
	if err != nil {
		return nil, fmt.Errorf("chaos: pg_lsclusters: %w", err)
	}
	fs := strings.Fields(string(out))
	if len(fs) == 0 {
		return nil, fmt.Errorf("chaos: pg_lsclusters lists no cluster to take the version from")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c := &pgCluster{version: fs[0], name: "chaos_" + id, port: port}
	// fsync off: a crash of the server's processes (not of the machine) loses nothing
	// that the page cache holds, and the shared machine is spared the flushes.
	cmd := exec.CommandContext(ctx, "pg_createcluster", c.version, c.name, "-p", strconv.Itoa(port), "--start",
		"-o", "fsync=off", "-o", "full_page_writes=off", "-o", "max_connections=200", "--", "--auth=trust")
	if out, err := cmd.CombinedOutput(); err != nil {
		c.drop()
		return nil, fmt.Errorf("chaos: pg_createcluster: %w\n%s", err, out)
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := waitTCP(rctx, c.addr()); err != nil {
		c.drop()
		return nil, err
	}
	return c, nil
}

func (c *pgCluster) addr() string { return "127.0.0.1:" + strconv.Itoa(c.port) }

// URL is the cluster's maintenance database.
func (c *pgCluster) URL() string {
	return "postgres://postgres@" + c.addr() + "/postgres?sslmode=disable"
}

// ctl runs pg_ctlcluster with args.
func (c *pgCluster) ctl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "pg_ctlcluster", append([]string{c.version, c.name}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chaos: pg_ctlcluster %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// drop stops and removes the cluster, data and configuration included.
func (c *pgCluster) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_ = exec.CommandContext(ctx, "pg_dropcluster", "--stop", c.version, c.name).Run()
}

// postgresCrash stops the suite's own cluster in immediate mode (a crash: no checkpoint,
// every session cut), keeps it down for down, and starts it again (crash recovery).
func (r *run) postgresCrash(ctx context.Context, c *pgCluster, down time.Duration) {
	start := time.Now()
	bg := context.WithoutCancel(ctx)
	err := c.ctl(bg, "stop", "-m", "immediate")
	if err == nil {
		sleep(ctx, down)
		if err = c.ctl(bg, "start"); err == nil {
			wctx, cancel := context.WithTimeout(bg, time.Minute)
			err = waitTCP(wctx, c.addr())
			cancel()
		}
	}
	r.record(FaultPostgresCrash, "postgres cluster "+c.name, fmt.Sprintf("stop -m immediate, down %s, start", down), start, err)
}
