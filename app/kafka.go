package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/internal/topicready"
)

// EnsureTopics creates every topic in topics that does not exist yet, with partitions
// partitions and the broker's default replication factor, through the admin API
// (kadm), and returns once every broker's metadata lists them all with a leader for each
// partition (until then a consumer or producer may be told they do not exist). Existing
// topics are left unchanged, whatever their partition count. It is safe to run from
// several processes at once.
func EnsureTopics(ctx context.Context, cl *kgo.Client, partitions int32, topics ...string) error {
	if len(topics) == 0 {
		return nil
	}
	if partitions < 1 {
		return fmt.Errorf("%w: topic partitions must be at least 1, got %d", ErrInvalidConfig, partitions)
	}
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, partitions, -1, nil, topics...)
	if err != nil {
		return fmt.Errorf("app: create topics: %w", err)
	}
	var errs []error
	for _, t := range resp.Sorted() {
		if t.Err != nil && !errors.Is(t.Err, kerr.TopicAlreadyExists) {
			errs = append(errs, fmt.Errorf("app: create topic %s: %w", t.Topic, t.Err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := topicready.Wait(ctx, cl, topics...); err != nil {
		return fmt.Errorf("app: topics created: %w", err)
	}
	return nil
}
