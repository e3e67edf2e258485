package service

// OnQueued calls f with the length of a lock-batch queue after each order joins
// it, so that tests can wait for a batch to be complete before letting it run.
func OnQueued(s *Service, f func(n int)) { s.onQueued = f }
