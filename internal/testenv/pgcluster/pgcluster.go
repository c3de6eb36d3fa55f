// Package pgcluster starts Postgres clusters of a program's own with Debian's
// postgresql-common tools (pg_createcluster, pg_ctlcluster, pg_dropcluster), each on a
// free port: for tests and harnesses that crash and restart a whole server, or that need
// server settings the shared Postgres does not have (ssl=on with a certificate of their
// own), without touching the shared one. It needs those tools and the rights to run them
// (root, or the postgres user).
//
//	c, err := pgcluster.Create(ctx, "chaos_1a2b", pgcluster.WithSetting("fsync", "off"))
//	if err != nil { ... }
//	defer c.Drop()
//	pool, err := pgxpool.New(ctx, c.URL())
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultStartTimeout bounds the wait for a new cluster to accept connections.
const DefaultStartTimeout = 60 * time.Second

// ErrNoCluster is returned by Create when pg_lsclusters lists no cluster to take the
// Postgres version from.
var ErrNoCluster = errors.New("pgcluster: pg_lsclusters lists no cluster to take the version from")

// Cluster is one cluster made by Create.
type Cluster struct {
	// Version and Name identify the cluster for pg_ctlcluster (e.g. "15", "chaos_1a2b").
	Version, Name string
	// Port is its TCP port on 127.0.0.1.
	Port int
	// written are the files WithConfigFile put in its configuration directory, which
	// pg_dropcluster leaves behind (it removes only the files it made).
	written []string
}

type config struct {
	settings        [][2]string
	files           map[string][]byte
	tlsCert, tlsKey []byte
}

// ErrInvalidConfig is returned (wrapped) by Create for an invalid option.
var ErrInvalidConfig = errors.New("pgcluster: invalid configuration")

// Option configures Create. An invalid value makes Create return an error wrapping
// ErrInvalidConfig.
type Option func(*config) error

// WithSetting sets a server parameter in the cluster's postgresql.conf (pg_createcluster
// -o name=value), e.g. WithSetting("ssl", "on").
func WithSetting(name, value string) Option {
	return func(c *config) error {
		if name == "" {
			return fmt.Errorf("%w: empty setting name", ErrInvalidConfig)
		}
		c.settings = append(c.settings, [2]string{name, value})
		return nil
	}
}

// WithConfigFile writes a file into the cluster's configuration directory (see
// [Cluster.ConfigDir]) before the server starts, owned by the postgres user and readable
// by it alone (mode 0600, as Postgres requires of a private key), e.g. a certificate that
// a WithSetting names by its path.
func WithConfigFile(name string, content []byte) Option {
	return func(c *config) error {
		if name == "" || filepath.Base(name) != name {
			return fmt.Errorf("%w: configuration file name %q", ErrInvalidConfig, name)
		}
		if c.files == nil {
			c.files = map[string][]byte{}
		}
		c.files[name] = content
		return nil
	}
}

// WithTLS turns TLS on (ssl=on) with this PEM certificate (chain) and private key,
// written as server.crt and server.key into the configuration directory. Clients may
// still connect without TLS unless a pg_hba.conf (WithConfigFile) says hostssl.
func WithTLS(certPEM, keyPEM []byte) Option {
	return func(c *config) error {
		if len(certPEM) == 0 || len(keyPEM) == 0 {
			return fmt.Errorf("%w: empty TLS certificate or key", ErrInvalidConfig)
		}
		c.tlsCert, c.tlsKey = certPEM, keyPEM
		return nil
	}
}

// ConfigDir returns where Debian keeps the configuration of cluster name of version.
func ConfigDir(version, name string) string { return filepath.Join("/etc/postgresql", version, name) }

// Create creates a cluster named name (a new one: Create fails if it exists) of the
// version of the first cluster pg_lsclusters lists, on a free port, writes its
// configuration files, starts it and waits until it accepts connections. On error
// nothing is left behind.
func Create(ctx context.Context, name string, opts ...Option) (*Cluster, error) {
	cfg := config{}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	out, err := exec.CommandContext(ctx, "pg_lsclusters", "-h").Output()
	if err != nil {
		return nil, fmt.Errorf("pgcluster: pg_lsclusters: %w", err)
	}
	fs := strings.Fields(string(out))
	if len(fs) == 0 {
		return nil, ErrNoCluster
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Version: fs[0], Name: name, Port: port}
	if cfg.tlsCert != nil {
		WithConfigFile("server.crt", cfg.tlsCert)(&cfg)
		WithConfigFile("server.key", cfg.tlsKey)(&cfg)
		cfg.settings = append(cfg.settings, [2]string{"ssl", "on"},
			[2]string{"ssl_cert_file", filepath.Join(c.ConfigDir(), "server.crt")},
			[2]string{"ssl_key_file", filepath.Join(c.ConfigDir(), "server.key")})
	}
	args := []string{c.Version, c.Name, "-p", strconv.Itoa(port)}
	for _, s := range cfg.settings {
		args = append(args, "-o", s[0]+"="+s[1])
	}
	args = append(args, "--", "--auth=trust")
	if out, err := exec.CommandContext(ctx, "pg_createcluster", args...).CombinedOutput(); err != nil {
		c.Drop()
		return nil, fmt.Errorf("pgcluster: pg_createcluster: %w\n%s", err, out)
	}
	if err := c.writeFiles(cfg.files); err != nil {
		c.Drop()
		return nil, err
	}
	if err := c.Ctl(ctx, "start"); err != nil {
		c.Drop()
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, DefaultStartTimeout)
	defer cancel()
	if err := WaitTCP(wctx, c.Addr()); err != nil {
		c.Drop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) writeFiles(files map[string][]byte) error {
	if len(files) == 0 {
		return nil
	}
	uid, gid := -1, -1
	if u, err := user.Lookup("postgres"); err == nil {
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	}
	for name, content := range files {
		p := filepath.Join(c.ConfigDir(), name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		c.written = append(c.written, p)
		if uid >= 0 && os.Geteuid() == 0 {
			if err := os.Chown(p, uid, gid); err != nil {
				return fmt.Errorf("pgcluster: %w", err)
			}
		}
	}
	return nil
}

// Addr is the cluster's host:port.
func (c *Cluster) Addr() string { return "127.0.0.1:" + strconv.Itoa(c.Port) }

// ConfigDir is the cluster's configuration directory (postgresql.conf, pg_hba.conf).
func (c *Cluster) ConfigDir() string { return ConfigDir(c.Version, c.Name) }

// URL is the cluster's maintenance database as user postgres, without TLS.
func (c *Cluster) URL() string {
	return "postgres://postgres@" + c.Addr() + "/postgres?sslmode=disable"
}

// Ctl runs pg_ctlcluster with args, e.g. Ctl(ctx, "stop", "-m", "immediate").
func (c *Cluster) Ctl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "pg_ctlcluster", append([]string{c.Version, c.Name}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: pg_ctlcluster %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Drop stops and removes the cluster, data and configuration included.
func (c *Cluster) Drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_ = exec.CommandContext(ctx, "pg_dropcluster", "--stop", c.Version, c.Name).Run()
	for _, p := range c.written {
		_ = os.Remove(p)
	}
	if len(c.written) > 0 {
		_ = os.Remove(c.ConfigDir()) // only if nothing else is left in it
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// WaitTCP waits until addr accepts TCP connections or ctx ends.
func WaitTCP(ctx context.Context, addr string) error {
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: %s does not accept connections: %w", addr, errors.Join(err, ctx.Err()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
