package testenv_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/internal/testenv"
)

// The replicated PostgreSQL starts with a leader and a synchronous standby;
// its multi-host URL reaches the leader, and after a switchover the new one;
// a killed member leaves no process behind.
func TestStartPatroni(t *testing.T) {
	p := testenv.StartPatroni(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	leader, err := p.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if port := serverPort(ctx, t, p.URL()); port != leader.Port {
		t.Fatalf("the URL reached port %d, the leader %s is on %d", port, leader, leader.Port)
	}
	standby, err := p.SyncStandby(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Switchover(ctx, standby.Name); err != nil {
		t.Fatal(err)
	}
	if port := serverPort(ctx, t, p.URL()); port != standby.Port {
		t.Fatalf("after the switchover the URL reached port %d, the new leader %s is on %d", port, standby, standby.Port)
	}
	// The old leader is a standby now: kill it, and nothing of it may answer.
	if err := p.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	pids := leader.Pids()
	if len(pids) < 5 { // Patroni, the postmaster, its checkpointer, writer, startup...
		t.Fatalf("%s runs %d processes", leader, len(pids))
	}
	leader.Kill()
	if conn, err := pgx.Connect(ctx, leader.URL("postgres")+"&connect_timeout=2"); err == nil {
		_ = conn.Close(ctx)
		t.Fatalf("%s answers after Kill", leader)
	}
	for _, pid := range pids {
		if testenv.Alive(pid) {
			t.Errorf("process %d of %s is left after Kill", pid, leader)
		}
	}
}

// serverPort is the port of the server a connection to url lands on.
func serverPort(ctx context.Context, t *testing.T, url string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var port string
	if err := conn.QueryRow(ctx, "SHOW port").Scan(&port); err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	return n
}
