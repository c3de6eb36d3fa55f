package lock

import "time"

// SetReleaseDelay sets how long l's background releases wait for an acquisition to carry
// them, so that a test can tell a carried release from one sent on its own without
// depending on timing.
func SetReleaseDelay(l *Locker, d time.Duration) { l.releaseDelay = d }

// Refresh runs one refresh of the lock ls's lease holds (or held, if it was kept), as its
// watchdog's timer does, so that a test can make the watchdog notice a lost lock now.
func Refresh(ls *Lease) { ls.h.extend() }
