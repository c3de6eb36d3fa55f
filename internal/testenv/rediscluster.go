package testenv

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisClusterNode is one redis-server of a RedisCluster.
type RedisClusterNode struct {
	Addr string
	cmd  *exec.Cmd
	out  *lockedBuilder
}

// Kill stops the node with SIGKILL, as a crash would.
func (n *RedisClusterNode) Kill() {
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
}

// RedisCluster is a Redis Cluster of the test's own: redis-server processes started with
// --cluster-enabled yes on free ports of 127.0.0.1, joined by redis-cli --cluster create.
type RedisCluster struct {
	Nodes []*RedisClusterNode
}

// Addrs returns every node's host:port, for redis.ClusterOptions.Addrs.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// StartRedisCluster starts masters × (1 + replicas) redis-server processes without
// persistence, a cluster node timeout of 1 s (a replica is promoted about 1–2 s after its
// master dies, however long it was disconnected: cluster-replica-validity-factor 0),
// creates the cluster and waits until every node reports cluster_state:ok and every
// replica's link to its master is up.
// The processes are killed when the test ends.
func StartRedisCluster(t testing.TB, masters, replicas int) *RedisCluster {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("testenv: redis-server not installed (apt-get install redis-server): %v", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("testenv: redis-cli not installed (apt-get install redis-tools): %v", err)
	}
	c := &RedisCluster{}
	for range masters * (1 + replicas) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
		cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
			"--cluster-replica-validity-factor", "0", "--save", "", "--appendonly", "no",
			"--dir", t.TempDir())
		n := &RedisClusterNode{Addr: "127.0.0.1:" + port, cmd: cmd, out: &lockedBuilder{}}
		cmd.Stdout, cmd.Stderr = n.out, n.out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			n.Kill()
			if t.Failed() {
				t.Logf("redis-server %s:\n%s", n.Addr, n.out.String())
			}
		})
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		Eventually(t, 20*time.Second, "redis-server "+n.Addr+" to listen", func() bool {
			conn, err := net.DialTimeout("tcp", n.Addr, time.Second)
			if err == nil {
				conn.Close()
			}
			return err == nil
		})
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("testenv: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, n := range c.Nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		Eventually(t, 30*time.Second, "cluster_state:ok on "+n.Addr, func() bool {
			info, err := rdb.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		Eventually(t, 30*time.Second, "replication in sync on "+n.Addr, func() bool {
			info, err := rdb.Info(context.Background(), "replication").Result()
			return err == nil && (strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up"))
		})
		rdb.Close()
	}
	return c
}

// MasterOf returns the node serving key's slot as master, asking the cluster through rdb.
func (c *RedisCluster) MasterOf(t testing.TB, rdb *redis.ClusterClient, key string) *RedisClusterNode {
	t.Helper()
	ctx := context.Background()
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			for _, n := range c.Nodes {
				if n.Addr == s.Nodes[0].Addr {
					return n
				}
			}
		}
	}
	t.Fatalf("testenv: no master found for slot %d of %q", slot, key)
	return nil
}
