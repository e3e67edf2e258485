package lock

import (
	"container/list"
	"context"
	"sync"
)

// handoff is what a local holder passes to the next local waiter with the slot.
type handoff struct {
	lease *lease // a single-resource lease still held in the Backend, or nil
	yield bool   // the lease was given up so other processes get a turn: do not race them
}

// slots is the local side of the lock: per resource, one caller in this process
// holds the slot and the others queue in FIFO order, so only one of them talks to
// the Backend at a time.
type slots struct {
	mu    sync.Mutex
	byID  map[string]*slotState
	spare *slotState // the last one freed, to reuse: most resources are taken by one caller at a time
}

type slotState struct {
	busy    bool
	waiters list.List // of chan handoff
}

// tryAcquire takes the slot of name if it is free, without waiting.
func (s *slots) tryAcquire(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stateLocked(name)
	if st.busy {
		return false
	}
	st.busy = true
	return true
}

// acquire takes the slot of name, waiting behind earlier callers. It reports whether
// it had to wait. When ctx ends first it returns ctx's error; granted then says
// whether the slot was handed over anyway, in which case the caller must pass it on.
func (s *slots) acquire(ctx context.Context, name string) (h handoff, waited, granted bool, err error) {
	s.mu.Lock()
	st := s.stateLocked(name)
	if !st.busy {
		st.busy = true
		s.mu.Unlock()
		return handoff{}, false, true, nil
	}
	ch := make(chan handoff, 1)
	e := st.waiters.PushBack(ch)
	s.mu.Unlock()

	select {
	case h := <-ch:
		return h, true, true, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case h := <-ch: // handed over while we gave up: the caller owns the slot now
		return h, true, true, context.Cause(ctx)
	default:
		st.waiters.Remove(e)
		return handoff{}, true, false, context.Cause(ctx)
	}
}

func (s *slots) stateLocked(name string) *slotState {
	if s.byID == nil {
		s.byID = make(map[string]*slotState)
	}
	st := s.byID[name]
	if st == nil {
		st, s.spare = s.spare, nil
		if st == nil {
			st = &slotState{}
		}
		st.busy = false
		s.byID[name] = st
	}
	return st
}

// tryPass hands the slot of name, with h, to the next waiter if there is one.
func (s *slots) tryPass(name string, h handoff) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.passLocked(name, h)
}

// pass hands the slot of name to the next waiter, or frees it.
func (s *slots) pass(name string, h handoff) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.passLocked(name, h) {
		s.spare = s.byID[name] // no waiters: its list is empty
		delete(s.byID, name)
	}
}

func (s *slots) passLocked(name string, h handoff) bool {
	st := s.byID[name]
	e := st.waiters.Front()
	if e == nil {
		return false
	}
	st.waiters.Remove(e)
	e.Value.(chan handoff) <- h
	return true
}
