package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/choreo-saga/choreo/internal/testenv/pgcluster"
)

// createCluster creates and starts a Postgres cluster of the suite's own (package
// internal/testenv/pgcluster), with trust authentication on a free port, so that a scenario can
// crash and restart a whole Postgres server without touching the shared one. fsync is
// off: a crash of the server's processes (not of the machine) loses nothing that the
// page cache holds, and the shared machine is spared the flushes.
func createCluster(ctx context.Context, id string) (*pgcluster.Cluster, error) {
	c, err := pgcluster.Create(ctx, "chaos_"+id, pgcluster.WithSetting("fsync", "off"),
		pgcluster.WithSetting("full_page_writes", "off"), pgcluster.WithSetting("max_connections", "200"))
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	return c, nil
}

// postgresCrash stops the suite's own cluster in immediate mode (a crash: no checkpoint,
// every session cut), keeps it down for down, and starts it again (crash recovery).
func (r *run) postgresCrash(ctx context.Context, c *pgcluster.Cluster, down time.Duration) {
	start := time.Now()
	bg := context.WithoutCancel(ctx)
	err := c.Ctl(bg, "stop", "-m", "immediate")
	if err == nil {
		sleep(ctx, down)
		if err = c.Ctl(bg, "start"); err == nil {
			wctx, cancel := context.WithTimeout(bg, time.Minute)
			err = pgcluster.WaitTCP(wctx, c.Addr())
			cancel()
		}
	}
	r.record(FaultPostgresCrash, "postgres cluster "+c.Name, fmt.Sprintf("stop -m immediate, down %s, start", down), start, err)
}
