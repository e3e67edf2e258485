package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/stockguard/stockguard/pkg/client"
)

// fakeService stands in for stockguard in the examples: it sells 3 units of
// A-1, has two pages of orders and a feed of three events.
func fakeService() *httptest.Server {
	stock := 3
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/orders", func(w http.ResponseWriter, r *http.Request) {
		var req client.OrderRequest
		_ = jsonDecode(r, &req)
		if req.Items[0].Quantity > stock {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			fmt.Fprintf(w, `{"type":"https://github.com/stockguard/stockguard/blob/main/docs/problems.md#insufficient-stock",`+
				`"title":"Insufficient stock","status":409,"detail":"not enough stock of A-1","request_id":"r2","skus":["A-1"],"available":{"A-1":%d}}`, stock)
			return
		}
		stock -= req.Items[0].Quantity
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ord_1","status":"placed","items":[{"sku":"A-1","quantity":%d}],"created_at":"2026-11-27T10:31:02Z"}`, req.Items[0].Quantity)
	})
	mux.HandleFunc("GET /v1/orders", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("starting_after") == "" {
			fmt.Fprint(w, `{"object":"list","url":"/v1/orders","has_more":true,"data":[`+
				`{"id":"ord_3","status":"placed","items":[{"sku":"A-1","quantity":1}],"created_at":"2026-11-27T10:33:00Z"},`+
				`{"id":"ord_2","status":"cancelled","items":[{"sku":"B-2","quantity":2}],"created_at":"2026-11-27T10:32:00Z"}]}`)
			return
		}
		fmt.Fprint(w, `{"object":"list","url":"/v1/orders","has_more":false,"data":[`+
			`{"id":"ord_1","status":"placed","items":[{"sku":"A-1","quantity":2}],"created_at":"2026-11-27T10:31:00Z"}]}`)
	})
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		data := ""
		switch r.URL.Query().Get("starting_after") {
		case "":
			data = `{"id":"evt_1","type":"stock.restocked","sku":"A-1","seq":1,"quantity":3,"change":{"available":3,"reserved":0,"sold":0,"stocked":3},` +
				`"counters":{"available":3,"reserved":0,"sold":0,"stocked":3},"created_at":"2026-11-27T10:30:00Z"},` +
				`{"id":"evt_2","type":"order.placed","sku":"A-1","seq":2,"quantity":2,"change":{"available":-2,"reserved":0,"sold":2,"stocked":0},` +
				`"counters":{"available":1,"reserved":0,"sold":2,"stocked":3},"order_id":"ord_1","created_at":"2026-11-27T10:31:02Z"}`
		case "evt_2":
			data = `{"id":"evt_3","type":"sku.low_stock","sku":"A-1","seq":3,"quantity":1,"change":{"available":0,"reserved":0,"sold":0,"stocked":0},` +
				`"counters":{"available":1,"reserved":0,"sold":2,"stocked":3},"created_at":"2026-11-27T10:31:02Z"}`
		}
		fmt.Fprintf(w, `{"object":"list","url":"/v1/events","has_more":false,"data":[%s]}`, data)
	})
	return httptest.NewServer(mux)
}

func ExampleClient_PlaceOrder() {
	srv := fakeService()
	defer srv.Close()

	c, err := client.New(srv.URL, client.WithAPIKey("sk_sg_..."))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	// One key per order, kept with the cart: sent again (after a crash, or an
	// OutcomeUnknownError), the order is replayed, never placed twice.
	order, err := c.PlaceOrder(ctx, client.OrderRequest{Items: []client.Item{{SKU: "A-1", Quantity: 2}}},
		client.IdempotencyKey("cart-8812"))
	if err != nil {
		panic(err)
	}
	fmt.Println(order.ID, order.Status, order.Items[0].Quantity)

	_, err = c.PlaceOrder(ctx, client.OrderRequest{Items: []client.Item{{SKU: "A-1", Quantity: 2}}})
	var p *client.Problem
	if errors.As(err, &p) && client.IsInsufficientStock(err) {
		fmt.Println(p.Status, p.Name(), p.SKUs, "available:", p.Available["A-1"])
	}
	// Output:
	// ord_1 placed 2
	// 409 insufficient-stock [A-1] available: 1
}

func ExampleClient_ListOrders() {
	srv := fakeService()
	defer srv.Close()
	c, _ := client.New(srv.URL, client.WithAPIKey("admin-token"))

	// The pages are fetched as the loop needs them (starting_after).
	for o, err := range c.ListOrders(context.Background(), client.ListOrdersParams{Limit: 2}) {
		if err != nil {
			fmt.Println("error:", err)
			break
		}
		fmt.Println(o.ID, o.Status)
	}
	// Output:
	// ord_3 placed
	// ord_2 cancelled
	// ord_1 placed
}

func ExampleClient_FollowEvents() {
	srv := fakeService()
	defer srv.Close()
	c, _ := client.New(srv.URL, client.WithAPIKey("sk_sg_..."))

	// Stop with the context (here, after 3 events; a tail -f on Ctrl-C).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	for e, err := range c.FollowEvents(ctx, "", client.PollInterval(10*time.Millisecond)) {
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Println(e.ID, e.Type, e.SKU, "available", e.Counters.Available)
		if n++; n == 3 {
			cancel()
		}
	}
	// Output:
	// evt_1 stock.restocked A-1 available 3
	// evt_2 order.placed A-1 available 1
	// evt_3 sku.low_stock A-1 available 1
}
