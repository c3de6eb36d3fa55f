// Package topicready waits until newly created Kafka topics can be used through every
// broker. A broker answers CreateTopics once the controller has committed the topics;
// each broker's metadata learns of them a moment later, so a client asking another (or
// even the same) broker right away may be told they do not exist.
package topicready

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// pollInterval is the pause between two metadata requests to one broker.
const pollInterval = 50 * time.Millisecond

// Wait returns nil once every broker of cl's cluster lists each of topics with a leader for
// every partition, or an error when ctx ends first (naming what was missing) or a broker
// cannot be asked.
func Wait(ctx context.Context, cl *kgo.Client, topics ...string) error {
	if len(topics) == 0 {
		return nil
	}
	brokers, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("topicready: list brokers: %w", err)
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	for _, b := range brokers.Brokers {
		for {
			resp, err := req.RequestWith(ctx, cl.Broker(int(b.NodeID)))
			if err != nil {
				return fmt.Errorf("topicready: metadata from broker %d: %w", b.NodeID, err)
			}
			missing := notReady(resp)
			if missing == "" {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("topicready: broker %d: %s: %w", b.NodeID, missing, ctx.Err())
			case <-time.After(pollInterval):
			}
		}
	}
	return nil
}

// notReady names the first topic of resp that is unknown, has no partitions yet or has a
// partition without a leader; empty when all are ready.
func notReady(resp *kmsg.MetadataResponse) string {
	for _, t := range resp.Topics {
		var name string
		if t.Topic != nil {
			name = *t.Topic
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return fmt.Sprintf("topic %s: %v", name, err)
		}
		if len(t.Partitions) == 0 {
			return fmt.Sprintf("topic %s: no partitions yet", name)
		}
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil || p.Leader < 0 {
				return fmt.Sprintf("topic %s partition %d: no leader (%v)", name, p.Partition, err)
			}
		}
	}
	return ""
}
