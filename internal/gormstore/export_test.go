package gormstore

// MigrateTo applies the migrations up to version, so that a test can build an
// older schema, fill it, and migrate it the rest of the way.
var MigrateTo = migrateTo

// WithEventsOutsideTransaction returns a store that writes its events outside
// the writes' transactions (never in the service: see Store.eventsOutside).
func (s *Store) WithEventsOutsideTransaction() *Store {
	c := *s
	c.eventsOutside = true
	return &c
}
