// Package rediswake carries the outbox's wake-ups between processes on Redis pub/sub
// (an [outbox.WakeChannel]): writers in an instance whose relay stands by publish a
// message after their commits, and the relay leading in another instance subscribes.
// Unlike a Postgres NOTIFY, a wake-up costs the database nothing: no transaction, no
// commit record, no global lock.
//
// Pub/sub delivers at most once, to whoever is subscribed at that moment. That is all
// a wake-up needs: the rows are in Postgres, a lost wake-up only delays them until the
// leader's next read or poll ([outbox.WithPollInterval]), and after every (re)subscribe
// the leader reads once. Channels are named [Prefix] + namespace + ":" + the outbox
// table, so the outboxes of several databases (several services) can share one Redis:
// give each its own namespace, e.g. the service's name.
package rediswake

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// Prefix starts the name of every channel.
const Prefix = "choreo:outbox:"

// pingAfter is how long a subscription may stay silent before it is checked with a
// PING, so that a half-open connection is noticed.
const pingAfter = 30 * time.Second

// ErrInvalidConfig is returned (wrapped) by New for a nil client or an empty namespace.
var ErrInvalidConfig = errors.New("rediswake: invalid configuration")

// Channel is an outbox.WakeChannel on Redis pub/sub. It is safe for concurrent use.
type Channel struct {
	rdb       redis.UniversalClient
	namespace string
}

// New returns a Channel that publishes and subscribes through rdb (a *redis.Client,
// *redis.ClusterClient or *redis.Ring) in namespace, which separates the outboxes of
// different databases sharing the Redis: every process of one outbox table must use
// the same namespace, and no other outbox may.
func New(rdb redis.UniversalClient, namespace string) (*Channel, error) {
	if rdb == nil || namespace == "" {
		return nil, fmt.Errorf("%w: nil client or empty namespace", ErrInvalidConfig)
	}
	return &Channel{rdb: rdb, namespace: namespace}, nil
}

// name is the Redis channel of the outbox table called table.
func (c *Channel) name(table string) string { return Prefix + c.namespace + ":" + table }

// Publish sends one wake-up for the outbox table called table: a PUBLISH with an empty
// message, one round trip.
func (c *Channel) Publish(ctx context.Context, table string) error {
	if err := c.rdb.Publish(ctx, c.name(table), "").Err(); err != nil {
		return fmt.Errorf("rediswake: publish on %s: %w", c.name(table), err)
	}
	return nil
}

// Subscribe calls wake when the subscription to table's channel is confirmed, again
// whenever go-redis re-subscribes after a broken connection, and for every message,
// until ctx ends (it returns ctx's error) or receiving fails (it returns the error). A
// connection silent for 30 seconds is checked with a PING.
func (c *Channel) Subscribe(ctx context.Context, table string, wake func()) error {
	ch := c.name(table)
	ps := c.rdb.Subscribe(ctx, ch)
	defer ps.Close()
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() }) // ends a blocked receive
	defer stop()
	for {
		msg, err := ps.ReceiveTimeout(ctx, pingAfter)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var nerr net.Error
		switch {
		case errors.As(err, &nerr) && nerr.Timeout():
			if err := ps.Ping(ctx); err != nil {
				return fmt.Errorf("rediswake: ping on %s: %w", ch, err)
			}
		case err != nil:
			return fmt.Errorf("rediswake: receive on %s: %w", ch, err)
		}
		switch msg.(type) {
		case *redis.Subscription, *redis.Message:
			wake()
		}
	}
}
