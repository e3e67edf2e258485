package redislease_test

// A private Redis Cluster for the tests that kill a master and watch its replica
// take over: six redis-server processes (three masters, one replica each) on free
// loopback ports, made a cluster with redis-cli --cluster create.

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

// clusterNodeTimeout is the nodes' cluster-node-timeout: how long a master must
// be unreachable before the others call it failed and its replica takes over.
const clusterNodeTimeout = 2 * time.Second

// redisCluster is a private Redis Cluster of three masters with one replica each,
// stopped when the test ends. It keeps nothing on disk but its nodes.conf files.
type redisCluster struct {
	Nodes []*redisServer
}

// startRedisCluster starts the cluster and waits until every node reports it ok
// and all of them agree on who serves which slots. Without redis-server or
// redis-cli on the PATH the test is skipped, or fails under
// STOCKGUARD_TEST_REQUIRE_REAL=1.
func startRedisCluster(tb testing.TB) *redisCluster {
	tb.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			if requireReal() {
				tb.Fatalf("%s is not on the PATH", bin)
			}
			tb.Skipf("%s is not on the PATH", bin)
		}
	}
	rc := &redisCluster{}
	for range 6 {
		rc.Nodes = append(rc.Nodes, lockservertest.RedisWith(tb, lockserver.RedisOptions{Debug: true, ClusterNodeTimeout: clusterNodeTimeout}))
	}

	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, rc.addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	waitAgreed(tb, rc.Nodes, 30*time.Second)
	return rc
}

func (rc *redisCluster) addrs() []string {
	var out []string
	for _, s := range rc.Nodes {
		out = append(out, s.Addr)
	}
	return out
}

// Client returns a new Cluster client with its own connections, configured as the
// service configures its own (context deadlines honoured), as a separate replica
// of the service would have. It is closed when the test ends.
func (rc *redisCluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.addrs(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Node returns the node listening on addr.
func (rc *redisCluster) Node(tb testing.TB, addr string) *redisServer {
	tb.Helper()
	for _, s := range rc.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	tb.Fatalf("no cluster node at %s", addr)
	return nil
}

// nodeClient runs fn on a plain client of one node, under a short deadline.
func nodeClient[T any](addr string, fn func(ctx context.Context, c *redis.Client) (T, error)) (T, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return fn(ctx, c)
}

// waitAgreed waits until every one of nodes says cluster_state:ok and knows all
// of them, all give the same map of slots to master and replica, and every
// replica has synchronised with its master (a replica that never did cannot take
// over).
func waitAgreed(tb testing.TB, nodes []*redisServer, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := agreed(nodes)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the cluster did not settle within %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond) // polling nodes that are gossiping
	}
}

func agreed(nodes []*redisServer) error {
	var first string
	for _, s := range nodes {
		info, err := nodeClient(s.Addr, func(ctx context.Context, c *redis.Client) (string, error) {
			return c.ClusterInfo(ctx).Result()
		})
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", s.Addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state is not ok", s.Addr)
		}
		if !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(nodes))+"\r") {
			return fmt.Errorf("%s: does not know all %d nodes yet", s.Addr, len(nodes))
		}
		view, replicas, err := slotMap(s.Addr)
		if err != nil {
			return err
		}
		if first == "" {
			first = view
		} else if view != first {
			return fmt.Errorf("%s sees the slots as\n%s\nanother node as\n%s", s.Addr, view, first)
		}
		for _, r := range replicas {
			repl, err := nodeClient(r, func(ctx context.Context, c *redis.Client) (string, error) {
				return c.Info(ctx, "replication").Result()
			})
			if err != nil {
				return fmt.Errorf("%s: INFO replication: %w", r, err)
			}
			if !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("replica %s has not synchronised yet", r)
			}
		}
	}
	return nil
}

// slotMap returns a node's view of the cluster, from CLUSTER NODES, as sorted
// lines "master slots... replicas...", and the replicas it names. Every master
// must have a replica and all 16384 slots must be served.
func slotMap(addr string) (string, []string, error) {
	nodes, err := clusterNodes(addr)
	if err != nil {
		return "", nil, err
	}
	var lines, replicas []string
	covered := 0
	for _, m := range nodes {
		if !slices.Contains(m.flags, "master") || len(m.slots) == 0 {
			continue
		}
		var rs []string
		for _, r := range nodes {
			if r.master == m.id && !slices.Contains(r.flags, "fail") {
				rs = append(rs, r.addr)
			}
		}
		if len(rs) == 0 {
			return "", nil, fmt.Errorf("%s: master %s has no replica", addr, m.addr)
		}
		for _, sl := range m.slots {
			lo, hi, ok := strings.Cut(sl, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return "", nil, fmt.Errorf("%s: slots %q of %s", addr, sl, m.addr)
			}
			covered += b - a + 1
		}
		slices.Sort(rs)
		replicas = append(replicas, rs...)
		lines = append(lines, m.addr+" "+strings.Join(m.slots, " ")+" "+strings.Join(rs, " "))
	}
	if covered != 16384 {
		return "", nil, fmt.Errorf("%s: %d slots of 16384 are served", addr, covered)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n"), replicas, nil
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, master string
	flags, slots     []string
}

func clusterNodes(addr string) ([]clusterNode, error) {
	out, err := nodeClient(addr, func(ctx context.Context, c *redis.Client) (string, error) {
		return c.ClusterNodes(ctx).Result()
	})
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER NODES: %w", addr, err)
	}
	var nodes []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("%s: CLUSTER NODES line %q", addr, line)
		}
		a, _, _ := strings.Cut(f[1], "@") // ip:port@cport[,hostname]
		nodes = append(nodes, clusterNode{id: f[0], addr: a, flags: strings.Split(f[2], ","), master: f[3], slots: f[8:]})
	}
	return nodes, nil
}

// replicaOf returns the address of the replica of the master at addr.
func (rc *redisCluster) replicaOf(tb testing.TB, addr string) string {
	tb.Helper()
	nodes, err := clusterNodes(addr)
	if err != nil {
		tb.Fatal(err)
	}
	var id string
	for _, n := range nodes {
		if n.addr == addr {
			id = n.id
		}
	}
	for _, n := range nodes {
		if n.master == id && id != "" {
			return n.addr
		}
	}
	tb.Fatalf("%s has no replica", addr)
	return ""
}

// waitPromoted waits until the node at replica calls itself a master, polling
// CLUSTER NODES on it, and returns when it first saw it so.
func (rc *redisCluster) waitPromoted(tb testing.TB, replica string, timeout time.Duration) time.Time {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		nodes, err := clusterNodes(replica)
		if err == nil {
			for _, n := range nodes {
				if n.addr == replica && slices.Contains(n.flags, "master") {
					return time.Now()
				}
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("replica %s was not promoted within %s (last error: %v)", replica, timeout, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the failover
	}
}
