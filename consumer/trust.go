package consumer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/choreo-saga/choreo/event"
)

// trustRule is one (source, topic) an event type is accepted from.
type trustRule struct{ source, topic string }

func (t trustRule) String() string {
	if t.topic == "" {
		return fmt.Sprintf("source %q on any topic", t.source)
	}
	return fmt.Sprintf("source %q on %s", t.source, t.topic)
}

// Trust declares that events of types are accepted only with ce_source source and, when
// topic is not empty, only from topic; it returns r. Calling it again for a type adds
// another accepted (source, topic). An event of a type with rules that matches none of
// them fails with ErrUntrusted before any lock or transaction: it is dead-lettered with
// reason "untrusted" and never applied. Types without a rule are accepted from any
// source and topic. The rules are applied by Filter, and so by Standard and
// StandardBatch on both paths; Route alone does not see the topic and does not apply
// them. Trust panics if source is empty or no type is given (programming
// errors).
//
// A rule is a check of what the record says about itself: anyone who may write to a
// topic can write any ce_source. The broker's ACLs (which principal may write which
// topic) are the security boundary; Trust catches events on the wrong topic and
// mistakes or forgeries by writers the ACLs let in.
func (r *Router) Trust(source, topic string, types ...string) *Router {
	if source == "" || len(types) == 0 {
		panic("consumer: Trust needs a source and at least one event type")
	}
	if r.trust == nil {
		r.trust = make(map[string][]trustRule)
	}
	for _, t := range types {
		if !slices.Contains(r.trust[t], trustRule{source, topic}) {
			r.trust[t] = append(r.trust[t], trustRule{source, topic})
		}
	}
	return r
}

// trusted returns nil when m's event may be applied by the trust rules of r, and an
// error matching ErrUntrusted otherwise.
func (r *Router) trusted(m *Message) error {
	rules := r.trust[m.Event.Type]
	if len(rules) == 0 {
		return nil
	}
	for _, t := range rules {
		if m.Event.Source == t.source && (t.topic == "" || m.Topic() == t.topic) {
			return nil
		}
	}
	want := make([]string, len(rules))
	for i, t := range rules {
		want[i] = t.String()
	}
	return fmt.Errorf("%w: %q from source %q on topic %q (accepted: %s)", ErrUntrusted,
		m.Event.Type, clipText(m.Event.Source, maxQuoted), m.Topic(), strings.Join(want, "; "))
}

// maxQuoted bounds untrusted text quoted in an error.
const maxQuoted = 128

// clipText returns s cut to at most n bytes, marked with "…" when cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Subjects declares the form of a valid subject (entity id) and returns r: an event
// whose subject valid rejects fails with an error matching event.ErrMalformed (it is
// dead-lettered as malformed) before any lock, fence or idempotency key is made from
// it. Default: any subject event.Validate accepts. Like Trust, it is applied by Filter.
func (r *Router) Subjects(valid func(subject string) error) *Router {
	r.subject = valid
	return r
}

// validSubject applies the Subjects rule to m.
func (r *Router) validSubject(m *Message) error {
	if r.subject == nil {
		return nil
	}
	if err := r.subject(m.Event.Subject); err != nil {
		return &event.Error{Field: "subject", Kind: event.ErrInvalidHeader,
			Detail: fmt.Sprintf("%q: %v", clipText(m.Event.Subject, maxQuoted), err)}
	}
	return nil
}
