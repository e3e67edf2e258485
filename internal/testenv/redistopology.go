package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
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

// The replicated topologies: a Sentinel group (StartSentinelGroup) and a Redis
// Cluster (StartRedisCluster), of real redis-server processes on free loopback
// ports, each in a temporary directory, killed when the test ends. Readiness is
// waited for by polling a condition with a deadline, never by sleeping.

// RedisNode is one redis-server process of a topology (a data node or a
// sentinel), started by lockservertest.RedisWith: Kill, Stop and Cont send it
// SIGKILL, SIGSTOP and SIGCONT.
type RedisNode struct {
	*lockserver.Server
	Port int
}

// startNode starts a node as opt says (a free loopback port, a directory of its
// own) and kills it when the test ends.
func startNode(t testing.TB, opt lockserver.RedisOptions) *RedisNode {
	t.Helper()
	s := lockservertest.RedisWith(t, opt)
	_, port, err := net.SplitHostPort(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	n := &RedisNode{Server: s.Server}
	if n.Port, err = strconv.Atoi(port); err != nil {
		t.Fatal(err)
	}
	return n
}

// Stop freezes the node (SIGSTOP): its connections stay open, nothing answers.
func (n *RedisNode) Stop() error {
	if !n.Alive() {
		return fmt.Errorf("redis node %s: not running", n.Addr)
	}
	n.Pause()
	return nil
}

// Cont continues a stopped node (SIGCONT).
func (n *RedisNode) Cont() error {
	if !n.Alive() {
		return fmt.Errorf("redis node %s: not running", n.Addr)
	}
	n.Resume()
	return nil
}

// Client returns a client of this node alone, closed when the test ends.
func (n *RedisNode) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// String names the node for test logs.
func (n *RedisNode) String() string { return "redis " + n.Addr }

// needRedisServer skips the test without redis-server on the PATH, or fails it
// under STOCKGUARD_TEST_REQUIRE_REAL=1.
func needRedisServer(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			if RequireReal() {
				t.Fatalf("%s is not on the PATH", bin)
			}
			t.Skipf("%s is not on the PATH", bin)
		}
	}
}

// pollUntil calls cond every 20ms until it returns nil or within has passed;
// then it fails the test with what and cond's last error.
func pollUntil(t testing.TB, within time.Duration, what string, cond func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := cond(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, within, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
	}
}

// infoField returns one field of an INFO section's text.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// SentinelGroup is a master, one replica (or more) and three sentinels watching
// them (quorum 2), with DownAfter and FailoverTimeout as their settings.
type SentinelGroup struct {
	MasterName      string
	Master, Replica *RedisNode   // as started; after a failover the roles change
	MoreReplicas    []*RedisNode // beyond Replica (StartSentinelGroupWith)
	Sentinels       []*RedisNode
	DownAfter       time.Duration
	FailoverTimeout time.Duration
}

// StartSentinelGroup starts the group and waits (at most 30s) until the replica
// is in sync and every sentinel knows the master, the replica and the two other
// sentinels, so that a failover can happen. down-after-milliseconds is 1s;
// failover-timeout is 10s: long enough that the sentinels leave a replica the
// test re-pointed on purpose alone for the length of a test (they reconfigure a
// replica that follows a wrong master only after failover-timeout), short
// enough that a failover that failed is retried within a test (2 x 10s).
func StartSentinelGroup(t testing.TB) *SentinelGroup { return StartSentinelGroupWith(t, 1) }

// StartSentinelGroupWith is StartSentinelGroup with n replicas (at least 1): with
// two, a failover leaves the new master a replica (for WAIT, say).
func StartSentinelGroupWith(t testing.TB, n int) *SentinelGroup {
	t.Helper()
	needRedisServer(t)
	g := &SentinelGroup{MasterName: "sg" + RandomID()[:6], DownAfter: time.Second, FailoverTimeout: 10 * time.Second}
	data := []string{"repl-diskless-sync yes", "repl-diskless-sync-delay 0"}
	g.Master = startNode(t, lockserver.RedisOptions{Debug: true, Conf: data})
	replicaOf := lockserver.RedisOptions{Debug: true, Conf: append(slices.Clone(data), "replicaof 127.0.0.1 "+strconv.Itoa(g.Master.Port))}
	g.Replica = startNode(t, replicaOf)
	for range max(n, 1) - 1 {
		g.MoreReplicas = append(g.MoreReplicas, startNode(t, replicaOf))
	}
	// The sentinels come after the sync: one that first saw the replica unsynced
	// would see it again only at its next INFO, 10s later.
	for _, node := range append([]*RedisNode{g.Replica}, g.MoreReplicas...) {
		replica := node.Client(t)
		pollUntil(t, 30*time.Second, "the replica in sync with the master", func(ctx context.Context) error {
			info, err := replica.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			if s := infoField(info, "master_link_status"); s != "up" {
				return fmt.Errorf("master_link_status %q", s)
			}
			return nil
		})
	}
	for range 3 {
		g.Sentinels = append(g.Sentinels, startNode(t, lockserver.RedisOptions{Sentinel: true, Conf: []string{
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", g.MasterName, g.Master.Port),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", g.MasterName, g.DownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", g.MasterName, g.FailoverTimeout.Milliseconds()),
			fmt.Sprintf("sentinel parallel-syncs %s 1", g.MasterName),
		}}))
	}
	for _, s := range g.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		pollUntil(t, 30*time.Second, "sentinel "+s.Addr+" knowing the whole group", func(ctx context.Context) error {
			m, err := sc.Master(ctx, g.MasterName).Result()
			if err != nil {
				return err
			}
			if m["num-slaves"] != strconv.Itoa(1+len(g.MoreReplicas)) || m["num-other-sentinels"] != "2" || m["flags"] != "master" {
				return fmt.Errorf("master %s: flags %s, %s replicas, %s other sentinels", g.MasterName, m["flags"], m["num-slaves"], m["num-other-sentinels"])
			}
			reps, err := sc.Replicas(ctx, g.MasterName).Result()
			if err != nil {
				return err
			}
			for _, r := range reps {
				if r["flags"] != "slave" || r["master-link-status"] != "ok" {
					return fmt.Errorf("replica %s:%s flags %s, link %s", r["ip"], r["port"], r["flags"], r["master-link-status"])
				}
			}
			return nil
		})
		_ = sc.Close()
	}
	return g
}

// URL is the group's REDIS_URL: the first sentinel, the master's name and the
// other sentinels as addr parameters (go-redis's ParseFailoverURL).
func (g *SentinelGroup) URL() string {
	q := url.Values{"master_name": {g.MasterName}}
	for _, s := range g.Sentinels[1:] {
		q.Add("addr", s.Addr)
	}
	return "redis://" + g.Sentinels[0].Addr + "?" + q.Encode()
}

// MasterAddr is the master's address as every live sentinel that answers
// reports it; an error when they disagree or none answers.
func (g *SentinelGroup) MasterAddr(ctx context.Context) (string, error) {
	var addr string
	for _, s := range g.Sentinels {
		if !s.Alive() {
			continue
		}
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		a, err := sc.GetMasterAddrByName(ctx, g.MasterName).Result()
		_ = sc.Close()
		if err != nil {
			return "", fmt.Errorf("sentinel %s: %w", s.Addr, err)
		}
		got := net.JoinHostPort(a[0], a[1])
		if addr != "" && got != addr {
			return "", fmt.Errorf("sentinels disagree: %s and %s", addr, got)
		}
		addr = got
	}
	if addr == "" {
		return "", errors.New("no sentinel answered")
	}
	return addr, nil
}

// Node returns the data node (master or replica) at addr, or nil.
func (g *SentinelGroup) Node(addr string) *RedisNode {
	for _, n := range append([]*RedisNode{g.Master, g.Replica}, g.MoreReplicas...) {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// WaitFailover waits (at most within) until every live sentinel names a master
// other than old, and that node answers ROLE as a master; it returns the new
// master.
func (g *SentinelGroup) WaitFailover(t testing.TB, old *RedisNode, within time.Duration) *RedisNode {
	t.Helper()
	var next *RedisNode
	pollUntil(t, within, "a failover away from "+old.Addr, func(ctx context.Context) error {
		addr, err := g.MasterAddr(ctx)
		if err != nil {
			return err
		}
		if addr == old.Addr {
			return errors.New("the sentinels still name the old master")
		}
		if next = g.Node(addr); next == nil {
			return fmt.Errorf("the sentinels name an unknown master %s", addr)
		}
		return roleIs(ctx, next, "master")
	})
	return next
}

func roleIs(ctx context.Context, n *RedisNode, want string) error {
	c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	role, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return err
	}
	if len(role) == 0 || role[0] != want {
		return fmt.Errorf("%s: ROLE %v, want %s", n.Addr, role, want)
	}
	return nil
}

// RedisCluster is a six-node Redis Cluster: three masters with one replica
// each, cluster-node-timeout NodeTimeout.
type RedisCluster struct {
	Nodes       []*RedisNode
	NodeTimeout time.Duration
}

// StartRedisCluster starts six nodes, joins them with redis-cli --cluster create
// (--cluster-replicas 1) and waits (at most 60s) until every node reports the
// cluster ok with every slot served, three masters each followed by a replica
// whose link is up.
func StartRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	needRedisServer(t)
	rc := &RedisCluster{NodeTimeout: 2 * time.Second}
	for range 6 {
		rc.Nodes = append(rc.Nodes, startNode(t, lockserver.RedisOptions{Debug: true, ClusterNodeTimeout: rc.NodeTimeout,
			Conf: []string{"repl-diskless-sync yes", "repl-diskless-sync-delay 0"}}))
	}
	args := []string{"--cluster", "create"}
	for _, n := range rc.Nodes {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	rc.WaitHealthy(t, 60*time.Second)
	return rc
}

// URL is the cluster's REDIS_URL: one node, the others as addr parameters
// (go-redis's ParseClusterURL).
func (rc *RedisCluster) URL() string {
	q := url.Values{}
	for _, n := range rc.Nodes[1:] {
		q.Add("addr", n.Addr)
	}
	return "redis://" + rc.Nodes[0].Addr + "?" + q.Encode()
}

// Node returns the node at addr, or nil.
func (rc *RedisCluster) Node(addr string) *RedisNode {
	for _, n := range rc.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, master string
	flags            []string
	connected        bool
	slots            []string
}

func (cn clusterNode) is(flag string) bool {
	for _, f := range cn.flags {
		if f == flag {
			return true
		}
	}
	return false
}

func clusterNodes(ctx context.Context, n *RedisNode) ([]clusterNode, error) {
	c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	raw, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var out []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		out = append(out, clusterNode{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3],
			connected: f[7] == "connected", slots: f[8:]})
	}
	return out, nil
}

// WaitHealthy waits until every live node reports cluster_state ok with all
// 16384 slots ok, and sees as many masters, each with a connected replica, as
// there are live pairs: a failover can then happen.
func (rc *RedisCluster) WaitHealthy(t testing.TB, within time.Duration) {
	t.Helper()
	pollUntil(t, within, "the Redis Cluster healthy", func(ctx context.Context) error {
		for _, n := range rc.Nodes {
			if !n.Alive() {
				continue
			}
			c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
			info, err := c.ClusterInfo(ctx).Result()
			_ = c.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
			if s := infoField(info, "cluster_state"); s != "ok" {
				return fmt.Errorf("%s: cluster_state %q", n, s)
			}
			if s := infoField(info, "cluster_slots_ok"); s != "16384" {
				return fmt.Errorf("%s: cluster_slots_ok %q", n, s)
			}
		}
		nodes, err := clusterNodes(ctx, rc.live()[0])
		if err != nil {
			return err
		}
		masters, replicated := 0, map[string]bool{}
		for _, cn := range nodes {
			if cn.is("fail") || cn.is("fail?") || !rc.liveAddr(cn.addr) {
				continue
			}
			if cn.is("master") && len(cn.slots) > 0 {
				masters++
			}
			if cn.is("slave") && cn.connected {
				replicated[cn.master] = true
			}
		}
		if masters != 3 || len(replicated) != 3 {
			return fmt.Errorf("%d masters serving slots, %d of them with a connected replica", masters, len(replicated))
		}
		return nil
	})
}

func (rc *RedisCluster) live() []*RedisNode {
	var out []*RedisNode
	for _, n := range rc.Nodes {
		if n.Alive() {
			out = append(out, n)
		}
	}
	return out
}

func (rc *RedisCluster) liveAddr(addr string) bool {
	n := rc.Node(addr)
	return n != nil && n.Alive()
}

// MasterOf returns the node that serves key's slot, as a live node's CLUSTER
// SHARDS-free view (CLUSTER KEYSLOT, then CLUSTER NODES) says.
func (rc *RedisCluster) MasterOf(ctx context.Context, key string) (*RedisNode, error) {
	live := rc.live()
	if len(live) == 0 {
		return nil, errors.New("no live node")
	}
	c := redis.NewClient(&redis.Options{Addr: live[0].Addr, MaxRetries: -1})
	slot, err := c.ClusterKeySlot(ctx, key).Result()
	_ = c.Close()
	if err != nil {
		return nil, err
	}
	nodes, err := clusterNodes(ctx, live[0])
	if err != nil {
		return nil, err
	}
	for _, cn := range nodes {
		if !cn.is("master") || cn.is("fail") {
			continue
		}
		for _, r := range cn.slots {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.ParseInt(lo, 10, 64)
			b, err2 := strconv.ParseInt(hi, 10, 64)
			if err1 == nil && err2 == nil && a <= slot && slot <= b {
				if n := rc.Node(cn.addr); n != nil {
					return n, nil
				}
				return nil, fmt.Errorf("slot %d served by unknown %s", slot, cn.addr)
			}
		}
	}
	return nil, fmt.Errorf("slot %d: no master serves it", slot)
}

// WaitFailover waits (at most within) until key's slot is served by a live
// master other than old, as every live node reports, and returns that master.
func (rc *RedisCluster) WaitFailover(t testing.TB, old *RedisNode, key string, within time.Duration) *RedisNode {
	t.Helper()
	var next *RedisNode
	pollUntil(t, within, "a failover of "+key+"'s slot away from "+old.Addr, func(ctx context.Context) error {
		m, err := rc.MasterOf(ctx, key)
		if err != nil {
			return err
		}
		if m == old || !m.Alive() {
			return fmt.Errorf("still served by %s", m)
		}
		next = m
		return roleIs(ctx, m, "master")
	})
	return next
}

// CutReplica makes the replica follow a master that does not exist (REPLICAOF a
// free loopback port nobody listens on) and waits (at most 10s) until its
// replication link is down: from then on it sees none of the master's writes,
// and a failover promotes it with the data it had. The sentinels still promote
// it: Redis's Sentinel documentation counts a replica as a candidate while its
// link with the master has been down for less than 10 x down-after-milliseconds
// plus the time since the master was found down, and it is reachable, answers
// INFO and has a non-zero replica-priority; and the sentinels re-point a replica
// that follows a wrong master only after failover-timeout (10s here), past the
// few seconds a test then takes to kill the master. The test checks that the
// promoted node lacks a key written after the cut, so a run in which the
// sentinels did otherwise fails rather than tests nothing.
func (g *SentinelGroup) CutReplica(t testing.TB) {
	t.Helper()
	c := g.Replica.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(lockservertest.FreePort(t))).Err(); err != nil {
		t.Fatalf("REPLICAOF on %s: %v", g.Replica, err)
	}
	pollUntil(t, 10*time.Second, g.Replica.String()+" cut off from replication", func(ctx context.Context) error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if s := infoField(info, "master_link_status"); s != "down" {
			return fmt.Errorf("master_link_status %q", s)
		}
		return nil
	})
}
