package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// AcquireAll obtains the leases of every distinct non-empty entity in
// entities, all or none, and returns them sorted by entity. Duplicates are
// obtained once and empty entities are skipped (they are not an
// ErrInvalidEntity here); with no entity left it returns nil, nil without
// a round trip.
//
// One attempt sends the obtain script of every entity in one pipeline when
// the client can pipeline (*redis.Client, *redis.ClusterClient, *redis.Ring),
// else one entity after another. If any entity is held by someone else, the
// attempt gives back, in one more round trip, the locks it obtained, then
// backs off with the Retry policy and tries the whole set again, for at most
// MaxWait or until ctx ends, like Acquire: it returns an error wrapping
// ErrNotObtained (and the context's error if ctx ended), or a wrapped Redis
// error after giving back what it obtained. Never waiting while holding part
// of a set means callers whose sets overlap cannot deadlock, in whatever
// order they list their entities.
//
// Each lease is an ordinary Lease, with its own token, watchdog and
// Context derived from ctx; release them with ReleaseAll or one by one.
func (l *Locker) AcquireAll(ctx context.Context, entities []string) ([]*Lease, error) {
	sorted := distinct(entities)
	if len(sorted) == 0 {
		return nil, nil
	}
	calls := make([]scriptCall, len(sorted))
	for i, e := range sorted {
		calls[i] = l.obtainCall(l.Key(e), randomValue())
	}
	for _, c := range calls { // kept holdings of these entities: released first, carried below
		if h := l.takeKept(c.keys[0]); h != nil {
			l.releaseKept(h)
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, l.cfg.maxWait)
	defer cancel()
	carry := l.takeForAcquire(ctx) // sent with the first attempt
	for i, c := range calls {      // our own background releases of these entities first
		if !l.awaitOthers(waitCtx, c.keys[0], &carry) {
			return nil, notObtained(ctx, sorted[i])
		}
	}
	r := retrier{policy: l.cfg.retry, none: l.cfg.noRetry}
	defer r.stop()
	for {
		start := time.Now()
		var cmds []*redis.Cmd
		if carry != nil {
			cmds = l.obtainCarrying(waitCtx, carry, calls)
			carry = nil
		} else {
			cmds = runAll(waitCtx, l.redis, calls)
		}
		tokens := make([]int64, len(cmds)) // > 0: obtained in this attempt
		held, failed := -1, -1
		var ferr error
		for i, cmd := range cmds {
			token, err := cmd.Int64()
			switch {
			case err == nil && token > 0:
				tokens[i] = token
			case err == nil:
				if held < 0 {
					held = i
				}
			case ferr == nil:
				failed, ferr = i, err
			}
		}
		if held < 0 && ferr == nil {
			leases := make([]*Lease, len(sorted))
			for i, e := range sorted {
				leases[i] = l.newLease(ctx, e, calls[i].keys[0], calls[i].args[0].(string), tokens[i], start)
			}
			return leases, nil
		}

		// All or none: give back what this attempt obtained. As in
		// Acquire, a lock whose reply was lost to an error is left to
		// expire after TTL.
		rerr := l.giveBack(ctx, calls, tokens)
		switch {
		case ferr != nil && waitCtx.Err() != nil:
			return nil, notObtained(ctx, sorted[failed])
		case ferr != nil:
			return nil, fmt.Errorf("lock: acquire %q: %w", sorted[failed], ferr)
		case rerr != nil:
			return nil, rerr
		}

		if err := r.pause(waitCtx); err != nil {
			return nil, notObtainedAfter(ctx, sorted[held], err)
		}
	}
}

// giveBack releases, in one round trip where the client can pipeline, the
// locks of calls whose token is positive (obtained in a failed AcquireAll
// attempt). It runs even when ctx has ended, for at most TTL: after that the
// locks are gone anyway. It returns the first Redis error, wrapped.
func (l *Locker) giveBack(ctx context.Context, calls []scriptCall, tokens []int64) error {
	var release []scriptCall
	for i, c := range calls {
		if tokens[i] > 0 {
			release = append(release, releaseCall(c.keys[0], c.args[0]))
		}
	}
	if len(release) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.ttl)
	defer cancel()
	for i, cmd := range runAll(rctx, l.redis, release) {
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("lock: release key %q after a partial acquire: %w", release[i].keys[0], err)
		}
	}
	return nil
}

// ReleaseAll releases leases (any of which may be nil) in one round trip
// where the client can pipeline, with Release's semantics for each; it
// returns the errors joined (errors.Join). Leases of different Lockers take
// one round trip per Locker.
func ReleaseAll(ctx context.Context, leases []*Lease) error {
	// Claim the releases first; leases another call is releasing are only
	// waited for.
	var (
		lockers []*Locker
		claimed = make(map[*Locker][]*holding)
	)
	for _, ls := range leases {
		if ls == nil {
			continue
		}
		if ended, _ := ls.end(false); !ended || !ls.h.beginRelease() {
			continue
		}
		l := ls.h.locker
		if _, ok := claimed[l]; !ok {
			lockers = append(lockers, l)
		}
		claimed[l] = append(claimed[l], ls.h)
	}
	for _, l := range lockers {
		mine := claimed[l]
		calls := make([]scriptCall, len(mine))
		for i, ls := range mine {
			calls[i] = ls.releaseCall()
		}
		for i, cmd := range runAll(ctx, l.redis, calls) {
			n, err := cmd.Int64()
			mine[i].endRelease(n, err)
		}
	}
	var errs []error
	for _, ls := range leases {
		if ls != nil {
			errs = append(errs, ls.result())
		}
	}
	return errors.Join(errs...)
}

// distinct returns the distinct non-empty entities, sorted.
func distinct(entities []string) []string {
	out := make([]string, 0, len(entities))
	for _, e := range entities {
		if e != "" {
			out = append(out, e)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// pipeliner is implemented by the go-redis clients that can send many
// commands in one round trip: *redis.Client, *redis.ClusterClient (one
// pipeline per node) and *redis.Ring.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// scriptCall is one run of a script: its KEYS and ARGV.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

// obtainCall is the run of the obtain script for the lock key with the holder's value.
func (l *Locker) obtainCall(key string, value any) scriptCall {
	return scriptCall{script: obtainScript, keys: []string{key, key + ":fence"}, args: []any{value, l.ttlArg, l.retentionArg}}
}

// releaseCall is the run of the release script for the lock key held with value.
func releaseCall(key string, value any) scriptCall {
	return scriptCall{script: releaseScript, keys: []string{key}, args: []any{value}}
}

// refreshCall is the run of the refresh script for the lock key held with value.
func (l *Locker) refreshCall(key string, value any) scriptCall {
	return scriptCall{script: refreshScript, keys: []string{key}, args: []any{value, l.ttlArg}}
}

// run runs the call's script on its own (EVALSHA, then EVAL if the script is not cached).
func (c scriptCall) run(ctx context.Context, rdb redislock.RedisClient) *redis.Cmd {
	return c.script.Run(ctx, rdb, c.keys, c.args...)
}

// runAll runs each call's script and returns the commands in the order of
// calls; read each command's reply and error. When c can pipeline, every
// call goes out as EVALSHA in one pipeline, and the calls answered NOSCRIPT
// (a fresh or flushed script cache: nothing ran) go out again as EVAL in a
// second one, which also caches the script for the next time. Otherwise
// the calls run one after another with Script.Run.
func runAll(ctx context.Context, c redislock.RedisClient, calls []scriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	p, ok := c.(pipeliner)
	if !ok {
		for i, call := range calls {
			cmds[i] = call.script.Run(ctx, c, call.keys, call.args...)
		}
		return cmds
	}
	pipe := p.Pipeline()
	for i, call := range calls {
		cmds[i] = call.script.EvalSha(ctx, pipe, call.keys, call.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read from each command
	var missing []int
	for i, cmd := range cmds {
		if err := cmd.Err(); errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return cmds
	}
	pipe = p.Pipeline()
	for _, i := range missing {
		cmds[i] = calls[i].script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}
