package lockserver_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

func TestEtcdCluster(t *testing.T) { ensembleHandles(t, lockservertest.EtcdCluster(t)) }

func TestZooKeeperEnsemble(t *testing.T) { ensembleHandles(t, lockservertest.ZooKeeperEnsemble(t)) }

// ensembleHandles: the ensemble has one leader; a stopped leader is replaced
// by another member, and counts again once continued; a killed and restarted
// member serves again; two members down leave no leader, and the two
// restarted (at once) make one again.
func ensembleHandles(t *testing.T, e *lockserver.Ensemble) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if len(e.Members) != lockserver.EnsembleSize {
		t.Fatalf("%d members", len(e.Members))
	}
	first, err := e.Leader(ctx)
	if err != nil {
		t.Fatalf("started, but: %v", err)
	}
	e.Stop(first)
	next, err := e.WaitLeader(ctx)
	if err != nil {
		t.Fatalf("with leader %d stopped: %v", first, err)
	}
	if next == first {
		t.Fatalf("member %d, stopped, still counted as the leader", first)
	}
	e.Cont(first)
	follower := (next + 1) % lockserver.EnsembleSize
	e.Kill(follower)
	if err := e.Restart(ctx, follower); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitLeader(ctx); err != nil {
		t.Fatalf("after member %d restarted: %v", follower, err)
	}
	// Two down: no quorum, no leader.
	down := []int{next, (next + 1) % lockserver.EnsembleSize}
	for _, i := range down {
		e.Kill(i)
	}
	if i, err := e.Leader(ctx); err == nil {
		t.Fatalf("member %d leads with members %v killed", i, down)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(down))
	for k, i := range down {
		wg.Go(func() { errs[k] = e.Restart(ctx, i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.WaitLeader(ctx); err != nil {
		t.Fatalf("after members %v restarted: %v", down, err)
	}
}
