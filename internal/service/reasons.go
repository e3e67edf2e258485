package service

// RefusalReasons are every value reason() gives: the reason label of
// stockguard_orders_refused_total, exported at 0 from a replica's start and
// listed in docs/operations.md (a test checks both against this list).
var RefusalReasons = []string{"insufficient_stock", "busy", "overloaded", "stale_fence", "lease_lost", "unknown_sku", "hold_quota_exceeded", "customer_limit_exceeded", "outcome_unknown", "unavailable", "error"}
