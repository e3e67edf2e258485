package main

import (
	"context"
	"errors"
	"fmt"

	sgclient "github.com/stockguard/stockguard/pkg/client"
)

// stock: the SKUs' stock, read, set, restocked and moved between locations.

func stockSubs() []subcommand {
	return []subcommand{
		{name: "get", args: "SKU", what: "read a SKU's stock, with its counts per location", setup: stockGet},
		{name: "list", what: "list the SKUs' stock, ascending by SKU", setup: stockList},
		{name: "set", args: "SKU", what: "set a SKU's available stock (creating the SKU), or, with --location, one location's", setup: stockSet},
		{name: "restock", args: "SKU", what: "add units to a SKU (creating it), or, with --location, to one location", setup: stockRestock},
		{name: "transfer", args: "SKU", what: "move available units of a SKU from one location to another, atomically", setup: stockTransfer},
	}
}

func stockGet(*envFlags) runFunc {
	return func(ctx context.Context, x *cli, args []string) error {
		st, err := x.api.GetSKU(ctx, args[0])
		if err != nil {
			return err
		}
		return x.printStock(st)
	}
}

func stockList(*envFlags) runFunc {
	return func(ctx context.Context, x *cli, _ []string) error {
		sts, err := collect(x.api.ListSKUs(ctx, sgclient.ListSKUsParams{Limit: 100}))
		if err != nil {
			return err
		}
		return x.print(sts, stockHeader, stockRows(sts...)...)
	}
}

func stockSet(e *envFlags) runFunc {
	var req sgclient.SetStockRequest
	var location string
	e.fs.IntVar(&req.Available, "available", 0, "the available stock to set, 0 to 1000000000 (required)")
	optional(e, &req.ExpectedAvailable, "expected-available", "compare-and-set: the available stock as you read it (0 for a SKU that does not exist); when it is not, nothing changes (409 stale-quantity)")
	e.fs.StringVar(&location, "location", "", "set the stock of this location only (then only --available and --expected-available apply)")
	optional(e, &req.MaxPerCustomer, "max-per-customer", "the most units of the SKU one customer may have in live holds and orders, 1 to 1000; 0 removes the limit; left out, kept")
	optional(e, &req.LowStockThreshold, "low-stock-threshold", "the available stock at or below which the SKU is low (event sku.low_stock); 0 removes it; left out, kept")
	optional(e, &req.BackorderLimit, "backorder-limit", "how many units orders may sell beyond what is available; left out, kept")
	return func(ctx context.Context, x *cli, args []string) error {
		if !e.set()["available"] {
			return errors.New("stock set: --available is required")
		}
		if location == "" {
			st, err := x.api.SetStock(ctx, args[0], req)
			return x.stockOrErr(st, err)
		}
		if req.MaxPerCustomer != nil || req.LowStockThreshold != nil || req.BackorderLimit != nil {
			return errors.New("stock set --location: --max-per-customer, --low-stock-threshold and --backorder-limit are the SKU's, not a location's: set them without --location")
		}
		st, err := x.api.SetLocationStock(ctx, args[0], location, sgclient.SetLocationStockRequest{Available: req.Available, ExpectedAvailable: req.ExpectedAvailable})
		return x.stockOrErr(st, err)
	}
}

func stockRestock(e *envFlags) runFunc {
	var req sgclient.RestockRequest
	var location, key string
	e.fs.IntVar(&req.Quantity, "quantity", 0, "the units to add, 1 to 1000000000 (required)")
	e.fs.StringVar(&location, "location", "", "add them to this location (left out: the SKU's default location)")
	keyFlag(e, &key)
	return func(ctx context.Context, x *cli, args []string) error {
		if location == "" {
			st, err := x.api.Restock(ctx, args[0], req, sgclient.IdempotencyKey(key))
			return x.stockOrErr(st, err)
		}
		st, err := x.api.RestockLocation(ctx, args[0], location, req, sgclient.IdempotencyKey(key))
		return x.stockOrErr(st, err)
	}
}

func stockTransfer(e *envFlags) runFunc {
	var req sgclient.TransferRequest
	var key string
	e.fs.StringVar(&req.From, "from", "", "the location the units leave (required)")
	e.fs.StringVar(&req.To, "to", "", "the location they go to (required)")
	e.fs.IntVar(&req.Quantity, "quantity", 0, "the units to move (required); never more than --from has available (409 insufficient-stock)")
	keyFlag(e, &key)
	return func(ctx context.Context, x *cli, args []string) error {
		st, err := x.api.TransferStock(ctx, args[0], req, sgclient.IdempotencyKey(key))
		return x.stockOrErr(st, err)
	}
}

// keyFlag declares --idempotency-key: the same key again replays the first
// answer instead of doing the work twice.
func keyFlag(e *envFlags, key *string) {
	e.fs.StringVar(key, "idempotency-key", "", "the request's Idempotency-Key (left out: a new one); after an unknown outcome, send the same command with the key it printed")
}

func (x *cli) stockOrErr(st *sgclient.Stock, err error) error {
	if err != nil {
		return err
	}
	return x.printStock(st)
}

// printStock prints a SKU's stock and, in a table, its locations below it.
func (x *cli) printStock(st *sgclient.Stock) error {
	if x.json {
		return x.printJSON(st)
	}
	if err := printTable(x.stdout, stockHeader, stockRows(*st)); err != nil || len(st.Locations) == 0 {
		return err
	}
	rows := make([][]string, len(st.Locations))
	for i, l := range st.Locations {
		rows[i] = []string{l.Location, itoa(l.Available), itoa(l.Reserved), itoa(l.Sold), itoa(l.Stocked)}
	}
	fmt.Fprintln(x.stdout)
	return printTable(x.stdout, []string{"LOCATION", "AVAILABLE", "RESERVED", "SOLD", "STOCKED"}, rows)
}

var stockHeader = []string{"SKU", "AVAILABLE", "RESERVED", "SOLD", "STOCKED", "BACKORDERED", "BACKORDER LIMIT", "MAX/CUSTOMER", "LOW STOCK AT"}

func stockRows(sts ...sgclient.Stock) [][]string {
	rows := make([][]string, len(sts))
	for i, s := range sts {
		rows[i] = []string{s.SKU, itoa(s.Available), itoa(s.Reserved), itoa(s.Sold), itoa(s.Stocked),
			itoa(s.Backordered), orDash(s.BackorderLimit), orDash(s.MaxPerCustomer), orDash(s.LowStockThreshold)}
	}
	return rows
}

// orDash prints a limit, "-" when there is none (0).
func orDash(n int) string {
	if n == 0 {
		return "-"
	}
	return itoa(n)
}
