package lock

import (
	"context"
	"errors"
	"slices"

	"github.com/redis/go-redis/v9"
)

// AcquireAll obtains the leases of every distinct non-empty entity in
// entities, all or none, and returns them sorted by entity. Duplicates are
// obtained once and empty entities are skipped (they are not an
// ErrInvalidEntity here); with no entity left it returns nil, nil without
// a round trip.
//
// One attempt sends the obtain script of every entity in one pipeline. If
// any entity is held by someone else, the attempt gives back, in one more
// round trip, the locks it obtained, then backs off (WithRetryBackoff) and
// tries the whole set again, for at most the max wait (WithMaxWait) or until
// ctx ends, like Acquire: it returns an error wrapping
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
	return l.acquire(ctx, sorted)
}

// ReleaseAll releases leases (any of which may be nil) in one round trip,
// with Release's semantics for each; it returns the errors joined
// (errors.Join). Leases of different Lockers take one round trip per Locker.
func ReleaseAll(ctx context.Context, leases []*Lease) error {
	// Claim the releases first; leases another call is releasing are only
	// waited for.
	var (
		lockers []*Locker
		claimed = make(map[*Locker][]*Lease)
	)
	for _, ls := range leases {
		if ls == nil || !ls.beginRelease() {
			continue
		}
		l := ls.locker
		if _, ok := claimed[l]; !ok {
			lockers = append(lockers, l)
		}
		claimed[l] = append(claimed[l], ls)
	}
	for _, l := range lockers {
		mine := claimed[l]
		calls := make([]scriptCall, len(mine))
		for i, ls := range mine {
			calls[i] = releaseCall(ls.key, ls.value)
		}
		for i, cmd := range runAll(ctx, l.redis, calls) {
			n, err := cmd.Int64()
			mine[i].endRelease(n, err)
		}
	}
	var errs []error
	for _, ls := range leases {
		if ls != nil {
			<-ls.releaseDone
			errs = append(errs, ls.releaseErr)
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
func (c scriptCall) run(ctx context.Context, rdb redis.Scripter) *redis.Cmd {
	return c.script.Run(ctx, rdb, c.keys, c.args...)
}

// runAll runs each call's script and returns the commands in the order of
// calls; read each command's reply and error. Every call goes out as EVALSHA
// in one pipeline, and the calls answered NOSCRIPT (a fresh or flushed
// script cache: nothing ran) go out again as EVAL in a second one, which
// also caches the script for the next time.
func runAll(ctx context.Context, c redis.UniversalClient, calls []scriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := c.Pipeline()
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
	pipe = c.Pipeline()
	for _, i := range missing {
		cmds[i] = calls[i].script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}
