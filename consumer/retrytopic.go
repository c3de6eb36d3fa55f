package consumer

import (
	"fmt"
	"strings"
)

// retryTopicInfix joins a topic and a consumer group into the name of the group's retry
// topic for that topic: topic + retryTopicInfix + group (see RetryTopic).
const retryTopicInfix = ".retry."

// maxTopicName is the longest topic name Kafka accepts.
const maxTopicName = 249

// RetryTopic returns the retry topic of group for topic, "<topic>.retry.<group>": the
// topic a replay of a record that group dead-lettered goes to, so that only that group
// handles it again (see WithRetryTopics).
func RetryTopic(topic, group string) string { return topic + retryTopicInfix + group }

// WithRetryTopics makes the consumer also consume, for each of its topics t, the topic
// RetryTopic(t, group), which only this group reads. `sagactl dlq replay` and the
// console's replay republish a dead letter there, so replaying a record one group
// failed on does not hand it to the other groups of t. A record of a retry topic is
// handled as a record of t: Message.Topic returns t, so the Router.Trust rules of t
// apply to it, its signature is checked as a record of t (Router.TrustKeys), and it is
// dead-lettered to t's dead-letter topic (choreo_dlq_topic names
// the retry topic, where the record sits). Run checks, before it consumes anything, that
// every retry topic exists, and returns an error matching ErrMissingTopic naming the
// missing ones (app.App creates them; kafka-topics.sh otherwise). The group must be
// usable in a topic name (ASCII letters, digits, '.', '_' and '-', and each retry
// topic's name at most 249 bytes): New returns an error matching ErrInvalidConfig
// otherwise. Default: off.
//
// The name "<topic>.retry.<group>" is reserved for this: Message.Topic maps a record of
// such a topic consumed by that group to <topic> whether or not this option is set.
func WithRetryTopics() Option {
	return func(c *config) error { c.retryTopics = true; return nil }
}

// retryTopicsOf returns the retry topics of group for topics, or an error matching
// ErrInvalidConfig if group cannot be part of a topic name.
func retryTopicsOf(group string, topics []string) ([]string, error) {
	for _, r := range group {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return nil, fmt.Errorf("%w: WithRetryTopics: group %q has a character a topic name cannot hold (%q)", ErrInvalidConfig, group, r)
		}
	}
	out := make([]string, len(topics))
	for i, t := range topics {
		out[i] = RetryTopic(t, group)
		if len(out[i]) > maxTopicName {
			return nil, fmt.Errorf("%w: WithRetryTopics: retry topic %q is longer than %d bytes", ErrInvalidConfig, out[i], maxTopicName)
		}
	}
	return out, nil
}

// Topic returns the topic m's record belongs to: Record.Topic, or, for a record of m's
// group's retry topic "<topic>.retry.<group>" (WithRetryTopics), <topic>. Trust rules
// and the dead-letter topic follow it; Record.Topic still names where the record sits.
func (m *Message) Topic() string {
	if m.Group != "" {
		if base, ok := strings.CutSuffix(m.Record.Topic, retryTopicInfix+m.Group); ok && base != "" {
			return base
		}
	}
	return m.Record.Topic
}
