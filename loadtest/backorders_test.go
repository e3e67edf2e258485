package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The teardown's audit reads I1 with backorders: a SKU may sell up to its
// backorder limit beyond what was stocked, and no more.
func TestTeardownCountsBackorders(t *testing.T) {
	for _, tc := range []struct {
		name              string
		sold, owed, limit int64
		wantOver          int64
		wantConsistent    bool
	}{
		{"within the limit", 12, 2, 3, 0, true},
		{"past the limit", 14, 4, 3, 1, false},
		{"no limit", 12, 2, 0, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/skus/A" {
					http.NotFound(w, r)
					return
				}
				_ = json.NewEncoder(w).Encode(map[string]any{"sku": "A", "available": 0, "reserved": 0, "sold": tc.sold,
					"stocked": 10, "backorder_limit": tc.limit, "backordered": tc.owed})
			}))
			defer srv.Close()
			c := newClient(srv.URL, "tok", "", 5*time.Second, &live{}, newRecorder())
			a := teardown(context.Background(), c, seeded{stock: map[string]int64{"A": 10}}, map[string]int64{"A": tc.sold}, 0, nil, false)
			if a.Oversold != tc.wantOver || a.Consistent != tc.wantConsistent || strings.Contains(a.AuditProblem, "A") {
				t.Fatalf("oversold %d, consistent %v (%s); want %d, %v", a.Oversold, a.Consistent, a.AuditProblem, tc.wantOver, tc.wantConsistent)
			}
		})
	}
}
