package lock

import "time"

// SetReleaseDelay sets how long l's background releases wait for an acquisition to carry
// them, so that a test can tell a carried release from one sent on its own without
// depending on timing.
func SetReleaseDelay(l *Locker, d time.Duration) { l.releaseDelay = d }

// SetRefreshBatchDelay sets how long the refreshes of l's kept locks wait for one another.
func SetRefreshBatchDelay(l *Locker, d time.Duration) { l.refreshBatchDelay = d }

// FlushRefreshes sends the queued refreshes of l's kept locks now.
func FlushRefreshes(l *Locker) { l.refreshKept() }

// Refresh runs one refresh of the lock ls's lease holds (or held, if it was kept), as its
// watchdog's timer does, so that a test can make the watchdog notice a lost lock now.
func Refresh(ls *Lease) { ls.h.extend() }
