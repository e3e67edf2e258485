package pglock

// The statements, as constants. Each is built once per Backend by fmt.Sprintf
// with the table's name, quoted as an identifier (New validates it): a table
// name cannot be a bind parameter. Every value is a bind parameter. Times are
// the database's: clock_timestamp() (not now(), which is the transaction's start
// and would stand still inside the obtain's transaction). Durations travel as
// microseconds.

// createTableSQL makes the lock table. Run under a transaction-scoped advisory
// lock (migrateLockSQL): CREATE TABLE IF NOT EXISTS is not safe from two sessions
// at once (both can pass the check, one fails on pg_type's unique index).
const createTableSQL = `CREATE TABLE IF NOT EXISTS %[1]s (
	resource    text        PRIMARY KEY,
	holder      text,
	lease_until timestamptz NOT NULL DEFAULT '-infinity',
	token       bigint      NOT NULL DEFAULT 0 CHECK (token >= 0)
)`

// migrateLockSQL serialises Migrate across replicas; the key is the table's
// name hashed, so migrations of other tables do not wait.
const migrateLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('stockguard/pglock/' || $1, 0))`

// obtainSQL takes every named row that is free, whose lease has ended, or that
// the caller's value already holds (a retry of an obtain whose answer was lost);
// each taken row's token grows by the block. It returns the rows taken: fewer
// than asked means another owner holds one, and the caller rolls back.
//
// The rows are taken in one order for every caller: the names sorted by their
// bytes (COLLATE "C", as Go's sort orders them, whatever the database's
// collation). INSERT ... SELECT ... ORDER BY inserts, and so locks conflicting
// rows, in the order of its SELECT, so two transactions over overlapping sets
// wait for each other in that order and never in a ring.
//
// $1 names, $2 value, $3 TTL in µs, $4 block.
const obtainSQL = `INSERT INTO %[1]s AS l (resource, holder, lease_until, token)
SELECT n, $2, clock_timestamp() + $3::bigint * interval '1 microsecond', $4::bigint
FROM unnest($1::text[]) AS u(n)
ORDER BY n COLLATE "C"
ON CONFLICT (resource) DO UPDATE
SET holder = excluded.holder, lease_until = excluded.lease_until, token = l.token + excluded.token
WHERE l.holder IS NULL OR l.holder = excluded.holder OR l.lease_until <= clock_timestamp()
RETURNING l.resource, l.token`

// undoSQL gives back what obtainSQL took when it did not take every row: the
// rows the value holds go back to free, with the block added to their token
// taken off again, unless the value holds all of them. It runs in the obtain's
// transaction (see obtainAll), which then commits what was there before, so
// that a busy obtain of several names is one round trip, not a second for a
// ROLLBACK. Every row the value holds was taken by that obtain: its guard takes
// rows the value held already, too.
//
// $1 names, $2 value, $3 how many names, $4 block.
const undoSQL = `UPDATE %[1]s SET holder = NULL, lease_until = clock_timestamp(), token = token - $4::bigint
WHERE resource = ANY($1::text[]) AND holder = $2
AND (SELECT count(*) FROM %[1]s WHERE resource = ANY($1::text[]) AND holder = $2) < $3::bigint`

// renewSQL extends the leases of the named rows the value holds, all or none:
// the CTE locks the rows still held (in the obtain's order) and the UPDATE runs
// only when it found every one. Under READ COMMITTED, FOR UPDATE re-reads a row
// changed since the statement began and re-checks it, so the count is of rows
// held now, not at the snapshot. It returns how many rows it extended.
//
// $1 names, $2 value, $3 TTL in µs, $4 how many names.
const renewSQL = `WITH mine AS (
	SELECT resource FROM %[1]s
	WHERE resource = ANY($1::text[]) AND holder = $2 AND lease_until > clock_timestamp()
	ORDER BY resource COLLATE "C"
	FOR UPDATE
), upd AS (
	UPDATE %[1]s AS l SET lease_until = clock_timestamp() + $3::bigint * interval '1 microsecond'
	WHERE l.resource IN (SELECT resource FROM mine) AND (SELECT count(*) FROM mine) = $4::bigint
	RETURNING 1
)
SELECT count(*) FROM upd`

// heldSQL reports whether the value holds the row's lease now.
const heldSQL = `SELECT EXISTS (
	SELECT 1 FROM %[1]s WHERE resource = $1 AND holder = $2 AND lease_until > clock_timestamp()
)`

// releaseSQL frees the named rows the value holds and announces each on the
// channel. The CTE locks those rows in the obtain's order first: an UPDATE by
// "resource = ANY(...)" alone locks rows in the order its scan meets them (a
// bitmap scan: the heap's), and a release locking x2 then x1 while a
// multi-name obtain holds x1 and waits for x2 is a deadlock (the test over
// overlapping sets found it). pg_notify runs in the statement's transaction, so
// the notification is delivered when the release commits, and not at all if it
// does not.
//
// $1 names, $2 value, $3 channel.
const releaseSQL = `WITH mine AS (
	SELECT resource FROM %[1]s
	WHERE resource = ANY($1::text[]) AND holder = $2
	ORDER BY resource COLLATE "C"
	FOR UPDATE
), freed AS (
	UPDATE %[1]s SET holder = NULL, lease_until = clock_timestamp()
	WHERE resource IN (SELECT resource FROM mine) AND holder = $2
	RETURNING resource
)
SELECT count(pg_notify($3, resource)) FROM freed`

// advanceSQL moves the row's token above past, for the value that holds the
// live lease only, and returns it; no row means not held.
//
// $1 name, $2 value, $3 past.
const advanceSQL = `UPDATE %[1]s SET token = greatest(token, $3::bigint) + 1
WHERE resource = $1 AND holder = $2 AND lease_until > clock_timestamp()
RETURNING token`
