package lock

import "time"

// SetReleaseDelay sets how long l's background releases wait for an acquisition to carry
// them, so that a test can tell a carried release from one sent on its own without
// depending on timing.
func SetReleaseDelay(l *Locker, d time.Duration) { l.releaseDelay = d }
