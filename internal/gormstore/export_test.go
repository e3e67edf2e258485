package gormstore

// MigrateTo applies the migrations up to version, so that a test can build an
// older schema, fill it, and migrate it the rest of the way.
var MigrateTo = migrateTo
