package consumer

import (
	"context"
	"fmt"

	"github.com/choreo-saga/choreo/event"
)

// TrustKeys declares that every event with ce_source source must be signed by one of
// keys (see event.Signer and outbox.WithSigner), and returns r. An event of that source
// with no signature, an unparsable one, one by another key or one that does not match
// the record fails with an error matching ErrBadSignature before any lock or
// transaction: it is dead-lettered with reason "bad_signature" and never applied.
// Events of other sources are not checked. The signature is checked for the topic the
// record belongs to (Message.Topic): a record of the group's retry topic (a replayed
// dead letter, see WithRetryTopics) verifies as a record of its source topic, which
// its signature names; on any other topic it does not verify. Calling it again for a source replaces its
// keys; to rotate a key, declare the old and the new one together until no record
// signed with the old one is left in the topics, then drop the old one. Like Trust, it
// is applied by Filter, and so by Standard and StandardBatch. TrustKeys panics if
// source is empty or keys is nil (programming errors).
//
// A signature proves which key signed the record, whoever wrote it to the topic:
// with it, a principal the broker's ACLs let write a topic can no longer pass off an
// event as another source's. Combine it with Trust, which fixes the source each
// event type must come from.
func (r *Router) TrustKeys(source string, keys *event.KeySet) *Router {
	if source == "" || keys == nil {
		panic("consumer: TrustKeys needs a source and a key set")
	}
	if r.keys == nil {
		r.keys = make(map[string]*event.KeySet)
	}
	r.keys[source] = keys
	return r
}

// signed returns nil when m's event comes from a source without keys or carries a
// valid signature by one of its source's keys, and an error matching ErrBadSignature
// otherwise.
func (r *Router) signed(m *Message) error {
	return verifySignature(r.keys, m)
}

// verifySignatures is a Middleware that checks signatures as Router.TrustKeys does, for
// chains without a Router: an event whose ce_source has keys in keys must be signed
// by one of them. It needs a decoded message (see Decode).
func verifySignatures(keys map[string]*event.KeySet) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			if err := verifySignature(keys, m); err != nil {
				return err
			}
			return next(ctx, m)
		}
	}
}

// verifySignature checks m's record against the keys of its event's source, as a
// record of m.Topic(): a replay on the group's retry topic verifies as its source
// topic's record.
func verifySignature(keys map[string]*event.KeySet, m *Message) error {
	set := keys[m.Event.Source]
	if set == nil {
		return nil
	}
	if err := set.VerifyAs(m.Record, m.Topic()); err != nil {
		return fmt.Errorf("%w: %q from source %q: %w", ErrBadSignature, m.Event.Type, clipText(m.Event.Source, maxQuoted), err)
	}
	return nil
}
