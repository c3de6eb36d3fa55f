package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// WithDeadLetterTopicCheck makes Run check, before it consumes anything, that the
// dead-letter topic (DeadLetterTopic) of every consumed topic exists. If any is missing,
// Run returns an error matching ErrMissingTopic that names them all. While the brokers
// cannot be reached, Run keeps asking (a Warn line says so) until its context ends.
// Default: not checked at start. It is WithDeadLetterTopics(DeadLetterTopic).
func WithDeadLetterTopicCheck() Option { return WithDeadLetterTopics(DeadLetterTopic) }

// WithDeadLetterTopics names dead-letter topics otherwise than DeadLetterTopic, and checks
// them at start as WithDeadLetterTopicCheck does: DeadLetter (in Standard and
// StandardBatch too) sends a record of topic t to name(t). A nil name is an error
// wrapping ErrInvalidConfig. Default: DeadLetterTopic(t), not checked at start.
func WithDeadLetterTopics(name func(source string) string) Option {
	return func(c *config) error {
		if name == nil {
			return invalidOption("nil dead-letter topic name function (WithDeadLetterTopicCheck checks the default names)")
		}
		c.dlqTopic = name
		return nil
	}
}

// checkTopics returns an error matching ErrMissingTopic if a dead-letter topic required by
// WithDeadLetterTopics, or a retry topic of WithRetryTopics, does not exist, asking the
// brokers for metadata (which never creates a topic). While the brokers cannot be asked
// (not reachable yet) it keeps trying, with a Warn line for the first failure, until ctx
// ends; it then returns nil and Run shuts down as usual.
func (c *Consumer) checkTopics(ctx context.Context, cl *kgo.Client) error {
	var want []string
	if c.cfg.dlqTopic != nil {
		for _, t := range c.topics {
			if d := c.cfg.dlqTopic(t); !slices.Contains(want, d) {
				want = append(want, d)
			}
		}
	}
	want = append(want, c.retry...)
	if len(want) == 0 {
		return nil
	}
	adm := kadm.NewClient(cl)
	var details kadm.TopicDetails
	for delay := checkTopicsMinDelay; ; delay = min(2*delay, checkTopicsMaxDelay) {
		var err error
		details, err = adm.ListTopics(ctx, want...)
		var authErr *kadm.AuthError
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &authErr):
			return fmt.Errorf("consumer: check dead-letter and retry topics: %w", err)
		default:
			if delay == checkTopicsMinDelay {
				c.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "consumer: cannot check the dead-letter and retry topics yet; retrying",
					slog.String("group", c.group), slog.Any("topics", want), slog.Any("error", err))
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
			continue
		}
		break
	}
	var missing []string
	for _, t := range want {
		// Any other error of the topic (e.g. no leader yet) means it exists.
		if d, ok := details[t]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			missing = append(missing, t)
		}
	}
	var errs []error
	if dlq := slices.DeleteFunc(slices.Clone(missing), func(t string) bool { return slices.Contains(c.retry, t) }); len(dlq) > 0 {
		errs = append(errs, fmt.Errorf("%w: dead-letter topic(s) %s of group %s do not exist; create them (app.EnsureTopics, kafka-topics.sh) before starting the consumer",
			ErrMissingTopic, strings.Join(dlq, ", "), c.group))
	}
	if retry := slices.DeleteFunc(missing, func(t string) bool { return !slices.Contains(c.retry, t) }); len(retry) > 0 {
		errs = append(errs, fmt.Errorf("%w: retry topic(s) %s of group %s do not exist (WithRetryTopics); create them (app.EnsureTopics, kafka-topics.sh) before starting the consumer",
			ErrMissingTopic, strings.Join(retry, ", "), c.group))
	}
	return errors.Join(errs...)
}

// Pauses between attempts of checkTopics while the brokers cannot be asked.
const (
	checkTopicsMinDelay = 200 * time.Millisecond
	checkTopicsMaxDelay = 5 * time.Second
)
