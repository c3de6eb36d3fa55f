package app

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// assignmentCheck is the readiness check consume adds for each consumer group: it fails
// when the consumer has held no partition for longer than grace while its group has
// lag. That is what a wedged group looks like from a live member: the partitions are
// held by a member that does not consume them (one the broker failed to remove after a
// kill -9) or a rebalance that never completes. A member idle for a moment (joining,
// between the two phases of a cooperative rebalance) is not flagged, nor is an idle
// member of a group that has caught up. A service with more instances than partitions
// has idle members by design; they report unready while the group has a backlog.
//
// assigned is consumer.Consumer.Assigned; the lag (committed offsets against end
// offsets, kadm.Client.Lag) is asked only once the consumer has been idle past grace.
func assignmentCheck(group string, assigned func() (int, time.Time), adm *kadm.Client, grace time.Duration) check {
	return func(ctx context.Context) error {
		n, since := assigned()
		if n > 0 || since.IsZero() {
			return nil
		}
		idle := time.Since(since)
		if idle < grace {
			return nil
		}
		lags, err := adm.Lag(ctx, group)
		if err == nil {
			if l, ok := lags[group]; ok {
				err = l.Error()
			}
		}
		if err != nil {
			return fmt.Errorf("%w: consumer group %s: this instance has held no partition for %s and the group's lag is unknown: %w",
				ErrNotReady, group, idle.Round(time.Second), err)
		}
		l := lags[group]
		total := l.Lag.Total()
		if total == 0 {
			return nil
		}
		return fmt.Errorf("%w: consumer group %s: this instance has held no partition for %s while the group has a lag of %d records (group %s, %d members)",
			ErrNotReady, group, idle.Round(time.Second), total, l.State, len(l.Members))
	}
}
