package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrMissingTopic: a topic the consumer needs does not exist; the error names it.
var ErrMissingTopic = errors.New("consumer: missing topic")

// WithDeadLetterTopics makes Run check, before it consumes anything, that the dead-letter
// topic of every consumed topic exists, name(topic) (nil name: topic + DeadLetterSuffix,
// DeadLetter's default). If any is missing, Run returns an error matching
// ErrMissingTopic that names them all. Default: no check. Use the same naming as the
// chain's DeadLetter (StandardConfig.DeadLetterTopic).
func WithDeadLetterTopics(name func(source string) string) Option {
	return func(c *config) {
		if name == nil {
			name = func(source string) string { return source + DeadLetterSuffix }
		}
		c.dlqTopic = name
	}
}

// checkTopics returns an error matching ErrMissingTopic if a dead-letter topic required by
// WithDeadLetterTopics does not exist, asking the brokers for metadata (which never
// creates a topic).
func (c *Consumer) checkTopics(ctx context.Context, cl *kgo.Client) error {
	if c.cfg.dlqTopic == nil {
		return nil
	}
	var want []string
	for _, t := range c.topics {
		if d := c.cfg.dlqTopic(t); !slices.Contains(want, d) {
			want = append(want, d)
		}
	}
	details, err := kadm.NewClient(cl).ListTopics(ctx, want...)
	if err != nil {
		return fmt.Errorf("consumer: check dead-letter topics: %w", err)
	}
	var missing []string
	for _, t := range want {
		d, ok := details[t]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			missing = append(missing, t)
		case d.Err != nil:
			return fmt.Errorf("consumer: check dead-letter topic %s: %w", t, d.Err)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: dead-letter topic(s) %s of group %s do not exist; create them (app.EnsureTopics, kafka-topics.sh) before starting the consumer",
			ErrMissingTopic, strings.Join(missing, ", "), c.group)
	}
	return nil
}
