// Package client is a Go client of stockguard's HTTP API (api/openapi.yaml):
// one method per operation, typed requests and answers, and retries that are
// safe because they follow what each answer says was done.
//
//	c, err := client.New("https://stock.example", client.WithAPIKey(key))
//	order, err := c.PlaceOrder(ctx, client.OrderRequest{Items: []client.Item{{SKU: "A-1", Quantity: 2}}})
//
// # Retries
//
// Every operation whose contract takes an Idempotency-Key is sent with one,
// the caller's (IdempotencyKey) or one the client makes, and with the same key
// on every attempt, so the server replays the first answer instead of doing
// the work twice. A call is tried again, after Retry-After or an exponential,
// jittered backoff (RetryPolicy), when its answer was lost (a connection cut
// after the request may have been sent), on 503 outcome-unknown, busy,
// overloaded, dependency-unavailable, lease-lost, stale-fence, timeout and
// unavailable, on 502, 504, 429 and on 409 idempotency-key-conflict. Every
// other answer is final: a 4xx says the request is wrong, a 500 is a bug.
//
// Operations without a key are retried only as far as repeating them is safe:
// reads, PUT, PATCH and DELETE always (a DELETE answered 404 after an attempt
// whose answer was lost is the success of that attempt; so is a set with
// expected_available answered stale-quantity with the stock it set), a cancel
// too (a 409 already-cancelled after a lost attempt is that attempt's cancel),
// and the other writes (creating a client, a key, a location, a webhook) only
// when the answer says that nothing was done. When the retries run out and the
// outcome is unknown, the error is an *OutcomeUnknownError: send the request
// again later, with the same key.
//
// # Errors
//
// An error answer is a *Problem (RFC 9457), found with errors.As; its Name is
// the stable part of its type, one of the Problem constants, and each has a
// predicate (IsInsufficientStock, IsNotFound, ...). An answer that is no
// problem (an HTML page from a proxy) is a *Problem too, of type about:blank,
// its body in Detail.
//
// # Lists
//
// Every List method returns an iter.Seq2 that fetches pages with
// starting_after as the loop consumes them and stops when the loop breaks;
// an error ends the sequence after it is yielded once. FollowEvents reads the
// event feed to its end and then polls it for new events until its context
// ends: the basis of a tail -f.
//
// The package imports the standard library only.
package client
