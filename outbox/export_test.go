package outbox

import "time"

// WithFollow sets how long a relay leader follows after a NOTIFY (NotifySpacing by
// default), so that a test can observe the following without racing the clock.
func WithFollow(d time.Duration) RelayOption { return func(c *relayConfig) { c.follow = d } }
