package batch

// OnGaveUp calls f when a caller of q's Do sees its context end while it waits,
// before it looks whether a lead took its item. Set it before any Do.
func OnGaveUp[T, R any](q *Queue[T, R], f func()) { q.gaveUp = f }

// Keys is the number of keys q holds a queue for.
func Keys[T, R any](q *Queue[T, R]) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queues)
}
