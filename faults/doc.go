// Package faults holds stockguard's fault-injection tests. Replicas run as
// processes of the built binary behind an in-test round-robin balancer, the load
// generator (loadtest/) drives one hot SKU through it, and faults are injected
// during the load: a lock holder paused past its lease or killed inside its
// critical section, the private redis-server killed and restarted empty or
// stalled with DEBUG SLEEP, one replica's Redis link slowed, cut and reset through
// an in-process toxiproxy, one replica's database sessions terminated mid-write,
// clients that lose an answer and retry with the same Idempotency-Key, and a
// seeded mix of all of them. On replicated Redis (replicated_test.go), the
// master of a Sentinel group killed, stopped, or killed after its replica was cut
// off, and a master of a six-node Redis Cluster killed. Holds (holds_test.go):
// the sweeper's leader stopped past its lease and killed, holds falling due
// while Redis is down, and confirms racing expiry. Stock events
// (events_test.go): the private nats-server stopped for 10 s under load and the
// relay's leader killed, then the relay's leader killed between its publish
// and its mark, three times; after each the whole stream is read back and every
// SKU's counters rebuilt from its events alone. After each, the invariants
// I1-I7 of the design are checked through the API and directly in the
// database.
//
// The tests carry the build tag "faults", so that "make test" stays fast; run them
// with "make test-faults". They need PostgreSQL (STOCKGUARD_TEST_DATABASE_URL) and
// redis-server on the PATH (the events tests nats-server too); a test that cannot run is reported as skipped, with
// the reason, and a run in which none ran fails. FAULTS.md, at the root of the
// repository, says what each test injects and checks, with the figures of the
// last run.
//
// The Go client (client_test.go): orders and holds placed only through
// pkg/client while the Patroni primary is killed and Redis restarted, some of
// their answers lost; every outcome-unknown settled with its key afterwards,
// then each operation found in the database exactly once, or not at all when
// it was refused, and every error returned one that docs/problems.md says.
//
// Webhooks (webhooks_test.go): an endpoint answering 500 and one hanging past
// the webhook timeout, beside a healthy one, under orders, the replicas also
// publishing to a private nats-server: the failing ones retried, then each
// event recorded failed and skipped in feed order; the healthy endpoint, the
// stream and the orders not slowed down.
package faults
