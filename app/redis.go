package app

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Names of the Redis variables of [LoadConfig] besides REDIS_ADDR.
const (
	envRedisURL       = "REDIS_URL"
	envRedisTLSCAFile = "REDIS_TLS_CA_FILE"
)

// redisProblems checks the Redis settings of c.
func (c Config) redisProblems() []problem {
	var ps []problem
	if c.RedisURL == "" {
		if c.RedisTLSCAFile != "" {
			ps = append(ps, problem{envRedisTLSCAFile, "needs a rediss:// " + envRedisURL})
		}
		return ps
	}
	o, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		// go-redis quotes parts of the URL in its errors: never repeat them.
		return append(ps, problem{envRedisURL, "not a redis://[user:password@]host[:port][/db] or rediss:// URL"})
	}
	if c.RedisTLSCAFile != "" && o.TLSConfig == nil {
		ps = append(ps, problem{envRedisTLSCAFile, "needs a rediss:// " + envRedisURL})
	}
	return ps
}

// redisOptions returns the client options of c's Redis, or nil without Redis.
func (c Config) redisOptions() (*redis.Options, error) {
	if c.RedisURL == "" {
		if c.RedisAddr == "" {
			return nil, nil
		}
		return &redis.Options{Addr: c.RedisAddr}, nil
	}
	o, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: not a redis:// or rediss:// URL", ErrInvalidConfig, envRedisURL)
	}
	if c.RedisTLSCAFile != "" && o.TLSConfig != nil {
		pem, err := os.ReadFile(c.RedisTLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, envRedisTLSCAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: %s: %s holds no PEM certificate", ErrInvalidConfig, envRedisTLSCAFile, c.RedisTLSCAFile)
		}
		o.TLSConfig.RootCAs = pool
	}
	if o.TLSConfig != nil && o.TLSConfig.MinVersion == 0 {
		o.TLSConfig.MinVersion = tls.VersionTLS12
	}
	return o, nil
}

// redisTarget names c's Redis for logs and errors without credentials:
// "rediss://host:port/db" or "host:port".
func (c Config) redisTarget() string {
	if c.RedisURL == "" {
		return c.RedisAddr
	}
	return redactURL(c.RedisURL)
}

// redactURL returns u without its user information (user names can be secrets too) and
// without query parameters other than their names; an unparsable u is replaced by
// "(unparsable URL)", since it may hold a password anywhere.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" {
		return "(unparsable URL)"
	}
	p.User = nil
	if p.RawQuery != "" {
		q := p.Query()
		names := make([]string, 0, len(q))
		for k := range q {
			names = append(names, k+"=…")
		}
		p.RawQuery = strings.Join(names, "&")
	}
	p.Fragment = ""
	return p.String()
}

// redisAuthHint says what to check when Redis refused the connection's credentials.
func redisAuthHint(err error) string {
	msg := err.Error()
	if strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "invalid password") {
		return " (Redis refused the credentials: check the user and password in " + envRedisURL + ")"
	}
	return ""
}
