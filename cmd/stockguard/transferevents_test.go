package main

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// A transfer's events reach the feed as the contract says: GET /v1/events,
// read by the validating client, lists stock.transferred_out and
// stock.transferred_in (the contract's Event type once lacked both).
func TestTransferEventsInTheFeed(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := startCluster(t, 1)
	sku := "TRF-" + time.Now().Format("150405.000000")
	admin(ctx, t, http.MethodPut, c.urls[0]+"/v1/skus/"+sku, `{"available":10}`, nil)
	admin(ctx, t, http.MethodPost, c.urls[0]+"/v1/locations", `{"id":"trf-east","name":"East"}`, nil)
	admin(ctx, t, http.MethodPost, c.urls[0]+"/v1/skus/"+sku+"/transfers", `{"from":"default","to":"trf-east","quantity":4}`, nil)
	seen := map[string]int{}
	both := func() bool { return seen["stock.transferred_out"] > 0 && seen["stock.transferred_in"] > 0 }
	for after := ""; !both() && ctx.Err() == nil; {
		var page struct {
			Data []struct {
				ID, Type, SKU string
				Quantity      int
			}
			HasMore bool `json:"has_more"`
		}
		url := c.urls[0] + "/v1/events?limit=100"
		if after != "" {
			url += "&starting_after=" + after
		}
		admin(ctx, t, http.MethodGet, url, "", &page)
		for _, e := range page.Data {
			if e.SKU == sku {
				seen[e.Type] += e.Quantity
			}
			after = e.ID
		}
		if !page.HasMore && !both() {
			time.Sleep(50 * time.Millisecond) // polling an outside observable: the relay lists an event a moment after its commit
		}
	}
	if seen["stock.transferred_out"] != 4 || seen["stock.transferred_in"] != 4 {
		t.Fatalf("the feed's events of %s: %v, want 4 units transferred out and in", sku, seen)
	}
}
