package testenv

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// ScriptHook is a go-redis hook (client.AddHook) that counts how Lua script commands
// reach Redis, for tests that check round trips.
type ScriptHook struct {
	// RoundTrips counts round trips that carry EVALSHA: a command, or a pipeline once.
	RoundTrips atomic.Int64
	// Evals counts EVAL commands (sent to resend an EVALSHA answered NOSCRIPT).
	Evals atomic.Int64
	// MultiScript counts pipelines that carry more than one script command.
	MultiScript atomic.Int64
}

// DialHook implements redis.Hook.
func (h *ScriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *ScriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *ScriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds)
		return next(ctx, cmds)
	}
}

func (h *ScriptHook) count(cmds []redis.Cmder) {
	evalsha, scripts := false, 0
	for _, cmd := range cmds {
		switch strings.ToLower(cmd.Name()) {
		case "evalsha":
			evalsha = true
			scripts++
		case "eval":
			h.Evals.Add(1)
			scripts++
		}
	}
	if evalsha {
		h.RoundTrips.Add(1)
	}
	if scripts > 1 {
		h.MultiScript.Add(1)
	}
}
