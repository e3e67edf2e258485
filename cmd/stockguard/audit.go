package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	sgclient "github.com/stockguard/stockguard/pkg/client"
)

// audit checks I1 in depth, straight from the database, or, with --url or
// $STOCKGUARD_URL, asks a running service (GET /v1/audit). From the database: every SKU's counters
// (available, reserved, stocked, sold) against each other and against the same
// recomputed from the ledger, the order lines and the hold lines; and I6 and I7
// on the holds. It prints the audit as JSON
// and fails when anything is off. Its cost grows with the history: it is the
// check to run after a load test or an incident, not on every request.
func audit(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	e := newFlags("audit", getenv, stderr)
	var databaseURL string
	var timeout, grace time.Duration
	e.secret(&databaseURL, "database-url", "DATABASE_URL", "sqlite:stockguard.db", "database: postgres://..., mysql://... or sqlite:<path>")
	e.fs.DurationVar(&timeout, "timeout", 5*time.Minute, "how long the audit may take")
	e.fs.DurationVar(&grace, "hold-grace", 6*time.Second, "database mode: how long past its expiry a hold may still be held (I6): the replicas' sweep interval plus their lock TTL")
	common := addCommonFlags(e, true, false)
	var deep bool
	e.fs.BoolVar(&deep, "deep", false, "with --url: also check the counters against the history, and I7 (GET /v1/audit?deep=true); the database mode always does")
	e.fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: stockguard audit [flags]\n\nCheck the invariants (I1, I6, I7, I9) and fail when one does not hold.\n\n%s\n\nFlags:\n",
			strings.Replace(modeRule, "it goes", "the audit goes", 1))
		e.fs.PrintDefaults()
	}
	if err := e.parse(args); err != nil {
		return err
	}
	if common.url != "" {
		common.timeout = timeout
		return auditAPI(ctx, common, deep, stdout, stderr)
	}
	if set := e.set(); (set["o"] || set["output"]) && common.output != "json" {
		return fmt.Errorf("-o %s: the database mode prints JSON (set --url or $STOCKGUARD_URL for the API's table)", common.output)
	}
	db, err := gormstore.Open(databaseURL)
	if err != nil {
		return err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	defer func() { _ = sqlDB.Close() }()
	store := gormstore.New(db, time.Now, timeout)
	a, err := store.Audit(ctx, true, grace)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(a); err != nil {
		return err
	}
	if !a.Consistent {
		return errors.New("audit: I1, I6 or I7 does not hold (see the SKUs whose consistent is false, and holds)")
	}
	fmt.Fprintf(stderr, "audit: %d SKUs, I1 holds, counters match the history; I6 and I7 hold\n", len(a.SKUs))
	return nil
}

// auditAPI runs the audit of a running service: GET /v1/audit, deep when
// asked; it fails as the database mode does when the audit is not consistent.
func auditAPI(ctx context.Context, common *commonFlags, deep bool, stdout, stderr io.Writer) error {
	x, err := common.open(stdout, stderr)
	if err != nil {
		return err
	}
	if common.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, common.timeout)
		defer cancel()
	}
	a, err := x.api.Audit(ctx, sgclient.AuditParams{Deep: deep})
	if err != nil {
		return explain(err)
	}
	if err := x.print(a, auditHeader, auditRows(a)...); err != nil {
		return err
	}
	summary := auditSummary(a)
	if !a.Consistent {
		return errors.New("audit: not consistent: " + summary)
	}
	fmt.Fprintln(stderr, "audit: consistent: "+summary)
	return nil
}

var auditHeader = []string{"SKU", "AVAILABLE", "RESERVED", "SOLD", "STOCKED", "OVERSOLD", "CONSISTENT"}

func auditRows(a *sgclient.Audit) [][]string {
	rows := make([][]string, len(a.SKUs))
	for i, s := range a.SKUs {
		rows[i] = []string{s.SKU, itoa(s.Available), itoa(s.Reserved), itoa(s.Sold), itoa(s.Stocked), itoa(s.Oversold), strconv.FormatBool(s.Consistent)}
	}
	return rows
}

// auditSummary names what the audit counted beside the SKUs' rows.
func auditSummary(a *sgclient.Audit) string {
	parts := []string{fmt.Sprintf("%d SKUs, %d units oversold", len(a.SKUs), a.Oversold)}
	if a.Holds != nil {
		parts = append(parts, fmt.Sprintf("holds overdue %d, stray orders %d", a.Holds.Overdue, a.Holds.StrayOrders))
	}
	if a.Caps != nil {
		parts = append(parts, fmt.Sprintf("caps over limit %d, miscounted %d", a.Caps.OverLimit, a.Caps.Miscounted))
	}
	if a.Deep {
		parts = append(parts, "deep (-1: not read)")
	}
	return strings.Join(parts, "; ")
}
