package outbox

import (
	"fmt"

	"github.com/choreo-saga/choreo/event"
)

// WithSigner signs every event the Outbox stores (Enqueue, Queue and so every relay
// publish) with s: the row keeps the event.HeaderSignature header over its topic, key,
// payload and CloudEvents headers, and the relay publishes it unchanged. Consumers
// check it with consumer.Router.TrustKeys. Use one key per producing service (its
// ce_source). Rows stored before a key change keep their signature: rotate by adding
// the new key to the consumers' sets first, then switching the signer, then dropping
// the old key once the outbox and the topics hold no record signed with it.
// Default: no signature.
func WithSigner(s *event.Signer) Option {
	return func(c *config) error {
		if s == nil {
			return fmt.Errorf("%w: nil signer", ErrInvalidConfig)
		}
		c.signer = s
		return nil
	}
}
