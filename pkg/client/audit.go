package client

import (
	"context"
	"net/http"
	"net/url"
)

// AuditParams chooses the audit.
type AuditParams struct {
	// Deep also checks the counters against the history, and I7.
	Deep bool
}

// Audit is the result of checking the invariants.
type Audit struct {
	SKUs []SKUAudit `json:"skus"`
	// Oversold is the units sold beyond the stock, in all.
	Oversold   int         `json:"oversold"`
	Holds      *AuditHolds `json:"holds,omitempty"`
	Caps       *AuditCaps  `json:"caps,omitempty"`
	Consistent bool        `json:"consistent"`
	Deep       bool        `json:"deep,omitempty"`
}

// SKUAudit is one SKU's audit.
type SKUAudit struct {
	SKU               string `json:"sku"`
	Available         int    `json:"available"`
	Reserved          int    `json:"reserved"`
	Sold              int    `json:"sold"`
	Stocked           int    `json:"stocked"`
	MaxPerCustomer    int    `json:"max_per_customer,omitempty"`
	LowStockThreshold int    `json:"low_stock_threshold,omitempty"`
	Oversold          int    `json:"oversold"`
	Consistent        bool   `json:"consistent"`
	// Recounted is, in a deep audit, the counters recomputed from history.
	Recounted *Stock `json:"recounted,omitempty"`
}

// AuditHolds is the holds' part of an audit (I6).
type AuditHolds struct {
	Overdue int `json:"overdue"`
	// StrayOrders is -1 when not read (not a deep audit).
	StrayOrders int `json:"stray_orders"`
}

// AuditCaps is the caps' part of an audit (I9).
type AuditCaps struct {
	OverLimit int `json:"over_limit"`
	// Miscounted is -1 when not read (not a deep audit).
	Miscounted int `json:"miscounted"`
}

// Audit checks the invariants (GET /v1/audit, admin).
func (c *Client) Audit(ctx context.Context, p AuditParams, opts ...CallOption) (*Audit, error) {
	var q url.Values
	if p.Deep {
		q = url.Values{"deep": {"true"}}
	}
	var out Audit
	err := c.do(ctx, &op{id: "audit", method: http.MethodGet, path: "/v1/audit", query: q, kind: kindRead, out: &out}, opts)
	return result(&out, err)
}
