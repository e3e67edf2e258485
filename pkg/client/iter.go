package client

import (
	"context"
	"iter"
	"net/url"
	"strconv"
)

// listing is one List call: its route, filters and how to read the cursor
// of the next page off the last item of a page.
type listing[T any] struct {
	id     string
	path   string
	query  url.Values
	limit  int
	after  string
	cursor func(T) string
}

// list pages through a listing with starting_after, fetching a page only
// when the loop has consumed the one before.
func list[T any](ctx context.Context, c *Client, l listing[T], opts []CallOption) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		after := l.after
		for {
			page, err := listPage(ctx, c, l, after, opts)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range page.Data {
				if !yield(it, nil) {
					return
				}
			}
			if !page.HasMore || len(page.Data) == 0 {
				return
			}
			after = l.cursor(page.Data[len(page.Data)-1])
		}
	}
}

// listPage reads the page after the cursor after ("" for the first).
func listPage[T any](ctx context.Context, c *Client, l listing[T], after string, opts []CallOption) (*Page[T], error) {
	q := url.Values{}
	for k, v := range l.query {
		q[k] = v
	}
	if l.limit > 0 {
		q.Set("limit", strconv.Itoa(l.limit))
	}
	if after != "" {
		q.Set("starting_after", after)
	}
	var page Page[T]
	err := c.do(ctx, &op{id: l.id, method: "GET", path: l.path, query: q, kind: kindRead, out: &page}, opts)
	if err != nil {
		return nil, err
	}
	return &page, nil
}
