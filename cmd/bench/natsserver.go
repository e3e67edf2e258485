package main

import (
	"context"
	"os"
	"strconv"
	"time"

	"github.com/stockguard/stockguard/internal/topology"
)

// natsServer is a private nats-server with JetStream that the bench starts on
// a free loopback port (topology.NATSServer), with its store in a temporary
// folder of its own, so that it can stop it (the catch-up run takes NATS down
// for a while) and start it again on the same port and store. close stops it
// and deletes the folder.
type natsServer struct{ *topology.NATSServer }

// startNATS starts a private nats-server -js; without nats-server on the PATH
// it says so (Debian: the nats-server package).
func startNATS(ctx context.Context) (*natsServer, error) {
	dir, err := os.MkdirTemp("", "stockguard-bench-nats-")
	if err != nil {
		return nil, err
	}
	s, err := topology.StartNATS(ctx, dir, "stockguard-bench-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &natsServer{s}, nil
}

// close stops the server and deletes its store.
func (s *natsServer) close() {
	s.Stop()
	_ = os.RemoveAll(s.Dir)
}
