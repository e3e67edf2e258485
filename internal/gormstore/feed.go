package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// The feed's end. An event's id is its place in the feed, given by the
// database's sequence when the event is inserted, and never written again.
// Ids are handed out in the order the writes insert, not the order they
// commit: a write that took id 7 may commit after the one that took id 8. A
// reader that took everything committed up to the largest id would pass 7 by
// for good (the reader that trusts the sequence). So the feed ends at a mark
// below which nothing can still commit:
//
//   - a mark is the largest id committed now, and the writes that may still
//     commit an event below it: on PostgreSQL the transactions holding a lock
//     on stock_events (an INSERT holds it from before its id is taken to its
//     end), read in the same statement; on MySQL the rows at or below it,
//     read with a locking read that fails when one is still being written;
//     on SQLite none, since it writes one transaction at a time;
//   - a mark settles when those writes have all ended; the relay then moves
//     the feed's end (event_cursors' row "feed") to its id. Readers (the feed,
//     the stream, the webhooks) read at or below the end only.
//
// Only writes of events hold the end back: a long transaction elsewhere does
// not, a write of events holds it for as long as it runs (bounded by its
// call's deadline).

// FeedEnd is the name of the cursor row that holds the feed's end.
const FeedEnd = "feed"

// mysqlSettle is how old a mark must be on MySQL before its locking read
// settles it (Store.settleAfter): InnoDB hands out a multi-row INSERT's ids
// before it writes the rows, so for that statement's run a taken id is in no
// row a locking read would wait for. A statement of insertRows rows runs for
// far less. Measured on the monotonic clock, not the store's.
const mysqlSettle = time.Second

// feedMark is one mark: through, the largest id committed when it was taken;
// waiting, the PostgreSQL transactions (virtual ids) that held a lock on
// stock_events then.
type feedMark struct {
	through int64
	waiting []string
	taken   time.Time
}

// feedMarks are the marks the relay took and that have not settled yet,
// oldest first, with the feed's end as this store last wrote it (-1: not
// read). One relay runs per cluster, so the marks live in its process.
type feedMarks struct {
	mu    sync.Mutex
	marks []feedMark
	end   int64
}

// maxMarks bounds the marks kept: past it the newest but one is dropped, which
// only makes the end move in larger steps.
const maxMarks = 64

var _ orders.EventStore = (*Store)(nil)

// AdvanceFeed takes a mark of what has committed, settles the marks taken
// before, and moves the feed's end to the newest settled one, under the
// relay's lease. It returns the end, and whether a mark is still waiting for a
// write to end (the relay then looks again soon).
func (s *Store) AdvanceFeed(ctx context.Context, leader orders.Leader) (orders.FeedEnd, error) {
	f := s.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	db := s.db.WithContext(ctx)
	if f.end < 0 {
		end, err := readCursor(db, FeedEnd)
		if err != nil {
			return orders.FeedEnd{}, unavailable("read the feed's end", err)
		}
		f.end = end
	}
	m, err := s.mark(db)
	if err != nil {
		return orders.FeedEnd{}, unavailable("mark the feed", err)
	}
	if len(f.marks) >= maxMarks {
		f.marks = append(f.marks[:len(f.marks)-2], f.marks[len(f.marks)-1])
	}
	f.marks = append(f.marks, m)
	end := f.end
	for len(f.marks) > 0 {
		ok, err := s.settled(db, f.marks[0], end, m)
		if err != nil {
			return orders.FeedEnd{Through: f.end, Waiting: true}, unavailable("settle the feed", err)
		}
		if !ok {
			break
		}
		end = max(end, f.marks[0].through)
		f.marks = f.marks[1:]
	}
	if end > f.end {
		err := s.tx(ctx, func(tx *gorm.DB) error {
			if err := s.lead(tx, leader); err != nil {
				return err
			}
			return moveCursor(tx, FeedEnd, end)
		})
		if err != nil {
			f.end = -1 // read it again: the write may have happened
			return orders.FeedEnd{Through: end, Waiting: len(f.marks) > 0}, unavailable("move the feed's end", err)
		}
		f.end = end
	}
	return orders.FeedEnd{Through: f.end, Waiting: len(f.marks) > 0}, nil
}

// mark reads the largest id committed and what may still commit below it.
func (s *Store) mark(db *gorm.DB) (feedMark, error) {
	m := feedMark{taken: time.Now()}
	switch db.Name() {
	case "postgres":
		// One statement: its snapshot gives the largest id, and pg_locks, read
		// after it, every write that took a smaller id and had not committed
		// at the snapshot (it holds its lock to its end).
		var waiting sql.NullString
		row := db.Raw(`SELECT (SELECT COALESCE(MAX(id), 0) FROM stock_events),
  (SELECT string_agg(DISTINCT virtualtransaction, ',') FROM pg_locks
   WHERE locktype = 'relation' AND relation = 'stock_events'::regclass AND mode = 'RowExclusiveLock'
     AND pid <> pg_backend_pid())`).Row()
		if err := row.Scan(&m.through, &waiting); err != nil {
			return m, err
		}
		if waiting.String != "" {
			m.waiting = strings.Split(waiting.String, ",")
		}
		return m, nil
	default:
		err := db.Raw("SELECT COALESCE(MAX(id), 0) FROM stock_events").Row().Scan(&m.through)
		return m, err
	}
}

// settled says whether nothing can still commit at or below m.through, past
// end (the feed's end now); now is the mark just taken.
func (s *Store) settled(db *gorm.DB, m feedMark, end int64, now feedMark) (bool, error) {
	if m.through <= end || s.trustSequence {
		return true, nil
	}
	switch db.Name() {
	case "postgres":
		// Settled when none of its writes still held the lock when now was
		// taken: no query of its own.
		for _, w := range m.waiting {
			if slices.Contains(now.waiting, w) {
				return false, nil
			}
		}
		return true, nil
	case "mysql":
		if time.Since(m.taken) < s.settleAfter {
			return false, nil
		}
		return lockedRange(db, end, m.through)
	default:
		return true, nil // SQLite: one writing transaction at a time
	}
}

// lockedRange reads the events after end through through with a locking read
// that fails at once on a row whose write has not ended (READ COMMITTED takes
// no gap locks, so it blocks no insert); true when none is.
func lockedRange(db *gorm.DB, end, through int64) (bool, error) {
	err := db.Transaction(func(tx *gorm.DB) error {
		var ids []int64
		return tx.Raw("SELECT id FROM stock_events WHERE id > ? AND id <= ? FOR UPDATE NOWAIT", end, through).Scan(&ids).Error
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err == nil {
		return true, nil
	}
	if isLockWait(err) {
		return false, nil
	}
	return false, err
}

// isLockWait says whether err is MySQL's or MariaDB's refusal of a NOWAIT
// read (3572; MariaDB answers 1205, the lock wait timeout): a row is locked by
// a write still running.
func isLockWait(err error) bool {
	var my *mysql.MySQLError
	return errors.As(err, &my) && (my.Number == 3572 || my.Number == 1205)
}

// readCursor reads the cursor name: 0 when it is not there yet (nothing
// delivered, the feed's end never moved, nothing purged).
func readCursor(db *gorm.DB, name string) (int64, error) {
	var rows []cursorRow
	if err := db.Where("name = ?", name).Limit(1).Find(&rows).Error; err != nil {
		return 0, err
	}
	if len(rows) == 0 {
		return 0, nil
	}
	return rows[0].Through, nil
}

// moveCursor moves the cursor name forward to through, never back, making it
// when it is not there.
func moveCursor(tx *gorm.DB, name string, through int64) error {
	res := tx.Exec("UPDATE event_cursors SET through = ? WHERE name = ? AND through < ?", through, name, through)
	if res.Error != nil || res.RowsAffected == 1 {
		return res.Error
	}
	var n int64
	if err := tx.Model(&cursorRow{}).Where("name = ?", name).Count(&n).Error; err != nil || n > 0 {
		return err // there, and at or past through already
	}
	return tx.Create(&cursorRow{Name: name, Through: through}).Error
}
