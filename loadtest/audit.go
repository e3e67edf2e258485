package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

type skuStock struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Sold      int64  `json:"sold"`
	Stocked   int64  `json:"stocked"`
	Oversold  int64  `json:"oversold"`
}

type serverAudit struct {
	SKUs       []skuStock `json:"skus"`
	Oversold   int64      `json:"oversold"`
	Consistent bool       `json:"consistent"`
}

// Audit is the teardown's verdict: what clients were sold against what was
// stocked, and against what the service says it sold.
type Audit struct {
	Stocked      int64    `json:"units_stocked"`
	ClientSold   int64    `json:"units_sold_client"`
	ServerSold   int64    `json:"units_sold_server"`
	Oversold     int64    `json:"oversold"`
	Consistent   bool     `json:"server_consistent"`
	Mismatches   []string `json:"mismatches,omitempty"`
	ServerAudit  bool     `json:"server_audit"`
	AuditProblem string   `json:"audit_problem,omitempty"`
}

func (c *client) adminCall(ctx context.Context, method, path, body string, into any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+c.admin)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: status %d", method, path, resp.StatusCode)
	}
	if into == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// setup seeds every SKU of every scenario through the admin API.
func setup(ctx context.Context, c *client, cfg Config) (map[string]int64, error) {
	stock := map[string]int64{}
	for _, s := range cfg.Scenarios {
		for i := range s.Workload.SKUs {
			sku := fmt.Sprintf("%s-%d", s.Workload.Prefix, i)
			stock[sku] += int64(s.Workload.Stock)
			if s.Workload.Stock == 0 {
				continue
			}
			body := fmt.Sprintf(`{"quantity":%d}`, s.Workload.Stock)
			if err := c.adminCall(ctx, http.MethodPost, "/v1/skus/"+sku+"/restock", body, nil); err != nil {
				return nil, fmt.Errorf("setup: %w", err)
			}
		}
	}
	return stock, nil
}

// teardown audits every unit: client-side, units in 201 answers per SKU (net of
// cancels) never exceed the stock and equal the server's sold; server-side,
// GET /v1/audit for the run's SKUs.
func teardown(ctx context.Context, c *client, stock map[string]int64, sold map[string]int64) Audit {
	a := Audit{Consistent: true}
	var server serverAudit
	if err := c.adminCall(ctx, http.MethodGet, "/v1/audit", "", &server); err != nil {
		a.AuditProblem = err.Error()
	} else {
		a.ServerAudit = true
	}
	bySKU := map[string]skuStock{}
	for _, s := range server.SKUs {
		bySKU[s.SKU] = s
	}
	for sku, st := range stock {
		a.Stocked += st
		cs := sold[sku]
		a.ClientSold += cs
		over := max(0, cs-st)
		if s, ok := bySKU[sku]; ok {
			a.ServerSold += s.Sold
			over = max(over, s.Oversold)
			if s.Sold != cs {
				a.Mismatches = append(a.Mismatches, fmt.Sprintf("%s: clients were sold %d, the service says %d", sku, cs, s.Sold))
			}
			if s.Stocked-s.Sold != s.Available || s.Available < 0 {
				a.Consistent = false
			}
		} else if a.ServerAudit {
			a.Mismatches = append(a.Mismatches, sku+": missing from the server's audit")
		}
		a.Oversold += over
	}
	return a
}
