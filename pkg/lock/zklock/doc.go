// Package zklock is a lock.Backend on ZooKeeper: a deployment that already
// runs an ensemble gets the lock.Client (its local FIFO queue, cohort handoff,
// watchdog and metrics) over a lease and a fencing token kept by ZooKeeper.
//
// # The nodes
//
//	<Root>/<name>                   persistent; data: the token floor (decimal, empty = 0)
//	<Root>/<name>/<value>-<seq>     ephemeral sequential, one per lease or try; data: its TTL in ms
//
// A Backend's leases are on one session (one zk.Conn; watches have their
// own, see below). Obtain creates a lease node under every name in one
// transaction (Multi: all or none), then reads each resource
// node: a resource with one child (ours) is granted, and that read gives the
// floor and the token base. Otherwise it lists the children and reads those
// lower than ours (the sequence number orders them, and no lower one can
// appear later). A lower node whose lease has ended is deleted, with the
// version read, so that a renewal in between wins; a live one makes the
// resource busy: our nodes are deleted and Obtain fails with lock.ErrBusy.
// A node's lease has ended when its mtime plus its TTL is before our node's
// ctime. Renew sets the lease nodes' data in one transaction (the leader
// stamps a new mtime); a node gone fails it with lock.ErrNotHeld. Held asks
// whether the node exists. Release deletes the nodes. The Backend remembers
// which nodes each value created: a value it did not grant holds nothing, so
// another value's Release, Renew or Advance changes nothing.
//
// Round trips: an uncontended Obtain 2 (the Multi, then the resource nodes'
// reads, pipelined); a contended one up to 6 (then the children and our
// node's stat; the lower nodes; the deletion of ended ones; the floor again),
// and a busy one deletes its nodes (one more). Renew and Release are one
// transaction (Multi) over the names, Held 1, Advance 2. The reads of an
// obtain are one request per name, pipelined (one round trip of wall time):
// the client library has no read-only Multi (ZooKeeper 3.6's multiRead). Every call is bounded by its
// context; the client library's calls take none, so a call that outlives its
// context is left to end when the client gives the connection up (two thirds
// of the session timeout without an answer).
//
// # TTL and session
//
// A lease ends at whichever comes first: its TTL, or its holder's session.
// The TTL is what the suite's "crashed holder" needs: a holder that stops
// renewing but whose process (and so session) lives on, frozen or leaking its
// Backend, gives its resources up after the TTL, measured from its last
// obtain or renewal on the leader's clock. The session is what ZooKeeper
// adds: a process that dies, or is cut off from the ensemble for the session
// timeout, loses its ephemeral nodes when the session expires, even if its
// TTL is longer; the Backend then forgets its leases at once (Held is false,
// Renew fails) and the Client cancels the work. A session timeout shorter
// than the TTL thus frees a dead holder's resources sooner, but a network
// blip as long as the session timeout ends every lease of the process.
//
// Releases are announced (lock.Notifier) by watches: a try that finds a
// resource busy sets an exists-watch on the live lower node, which fires when
// it is deleted (released, taken over, its session expired), and Subscribe
// delivers the name. Watches are set only while someone subscribes, each on a
// session and connection of its own that never reconnects (a lost connection
// wakes the waiters instead): the ZooKeeper client races with itself when it
// re-registers a session's watches on a new connection, so the Backend's
// session, which moves across members, never holds one.
//
// # Fencing tokens
//
// A grant's token base is the resource node's pzxid, the zxid of the last
// creation or deletion of one of its children, as read in a state where our
// lease node is the lowest child. Tokens are floor + base*MaxBlock (the top of
// the block) and the block's others below it; Advance raises the floor, in a
// transaction that also checks the caller's lease node exists, to the least
// value that puts floor + base*MaxBlock above both past and the previous
// token.
//
// Why tokens grow. Let A hold a resource, then B. B's base was read in a state
// that includes the deletion of A's lease node (B's node is the lowest), while
// A's base was read in a state where A's node existed. Zxids order every
// transaction of the ensemble, so the deletion's zxid, and so B's base, is
// above A's base: B's base >= A's base + 1, and B's lowest token, floor_B +
// base_B*MaxBlock - block + 1 with block <= MaxBlock, is above every token of
// A, advanced ones included (A's Advances happened while A's node existed, so
// before B's read, and the floor only grows). The floor is the resource node's
// data, written only with the version read, so no write is lost to a race.
//
// Across a change of leader the same holds: the new leader starts a new
// epoch, so the zxid of every transaction after the change, the creation of
// the next holder's lease node included, is above every zxid before it, and
// the next grant's base (the pzxid read once that node is the lowest) is above
// every base before. faults/ensembles_test.go kills a three-member ensemble's
// leader under contention and compares the tokens from before and after. An
// ensemble is listed in the URL (zk://h1:2181,h2:2181,h3:2181/chroot); the
// session moves to another member when its own goes down or stops answering
// (within two thirds of the session timeout), and a member without a quorum
// serves nothing, so that calls fail and the Client answers
// lock.ErrUnavailable, never a grant.
//
// The guarantee holds as long as ZooKeeper keeps every transaction it
// acknowledged: ZooKeeper fsyncs its log before it acknowledges, a restart
// replays it (the counter continues), and a new leader starts a new epoch
// (zxid = epoch<<32 | counter), so zxids keep growing across restarts and
// elections. It fails, and a token can repeat an earlier one, when
// acknowledged transactions are lost: the data directories wiped or restored
// from an old backup, forceSync=no and a crash, or the resource node deleted
// by hand. The store covers those: it keeps the largest token it accepted and
// refuses any token not above it; the holder then calls lock.Grant.Advance
// with that token. The int64 bound: base*MaxBlock overflows when the epoch
// reaches 2^21 (two million leader elections); Obtain and Advance fail rather
// than wrap. Sequence numbers are 32-bit per resource node: after about a
// billion tries on one resource its nodes' order breaks (delete and recreate
// the resource node, with its floor, to reset it).
//
// # Clocks
//
// A lease's end is judged on the leader's clock only: mtime and ctime are
// stamped by the leader when it orders the transactions, and the client sends
// durations, never times. The Client measures a lease's validity on its own
// monotonic clock from when it sent the Obtain or Renew, which is before the
// leader stamped it, so it cancels the work first, unless the leader's clock
// runs fast against the client's by more than the Client's margin over a
// lease (or a new leader's clock is ahead of the old one's by that much): then
// another owner can take the resource while the first still works, and the
// fencing token refuses the first owner's late writes.
//
// # Costs
//
// Every obtain, renewal and release is a write of the ensemble (a quorum's
// fsync) and wakes every watcher of the node concerned. A watched node costs
// its watcher a session while watched (its creation and expiry are writes too)
// and a connection, which counts against the server's maxClientCnxns. A resource node and
// its floor stay after use: one persistent node per resource ever locked.
package zklock
