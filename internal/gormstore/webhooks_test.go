package gormstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// TestWebhooks creates, lists, reads and deletes endpoints; checks that a new
// endpoint starts at the feed's last position, that its cursor moves forward
// only, with its failures recorded in the same write and under the relay's
// lease, and that the lowest cursor bounds the purge.
func TestWebhooks(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) { testWebhooks(t, kind) })
	}
}

func testWebhooks(t *testing.T, kind string) {
	s, clk := newHoldStore(t, kind)
	ctx := context.Background()

	if _, ok, err := s.WebhooksThrough(ctx); err != nil || ok {
		t.Fatalf("lowest cursor with no endpoint: %v %v", ok, err)
	}
	a, err := s.CreateWebhook(ctx, orders.Webhook{ID: "wh_0a", URL: "https://a.example/hook", Secret: "whsec_a", CreatedAt: clk.Now()})
	if err != nil || a.Position != 0 || !a.CreatedAt.Equal(clk.Now()) {
		t.Fatalf("created %+v %v, want position 0 (an empty feed)", a, err)
	}
	mustRestock(t, s, "A-1", 10, 1)
	mustRestock(t, s, "A-1", 10, 2)
	mustRestock(t, s, "A-1", 10, 3)
	end, err := s.Settle(ctx, relay)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.Events(ctx, 0, 10)
	if err != nil || len(evs) != 3 || evs[2].Position != end {
		t.Fatalf("the feed %+v %v, want 3 events through its end %d", evs, err, end)
	}
	p1, p2, p3 := evs[0].Position, evs[1].Position, evs[2].Position
	b, err := s.CreateWebhook(ctx, orders.Webhook{ID: "wh_0b", URL: "http://b.example/", Secret: "whsec_b", CreatedAt: clk.Now()})
	if err != nil || b.Position != p3 {
		t.Fatalf("created %+v %v, want position %d (the feed's last)", b, err, p3)
	}
	if _, err := s.CreateWebhook(ctx, orders.Webhook{ID: "wh_0b", URL: "http://c.example/", Secret: "s", CreatedAt: clk.Now()}); err == nil {
		t.Fatal("an id twice was stored")
	}
	if got, err := s.Webhook(ctx, "wh_0b"); err != nil || got.URL != b.URL || got.Secret != "whsec_b" || got.Position != p3 {
		t.Fatalf("read %+v %v", got, err)
	}
	if _, err := s.Webhook(ctx, "wh_ff"); !errors.Is(err, orders.ErrNotFound) {
		t.Fatalf("an unknown endpoint: %v", err)
	}
	if list, err := s.Webhooks(ctx, "", 10); err != nil || len(list) != 2 || list[0].ID != "wh_0a" {
		t.Fatalf("listed %+v %v", list, err)
	}
	if list, err := s.Webhooks(ctx, "wh_0a", 10); err != nil || len(list) != 1 || list[0].ID != "wh_0b" {
		t.Fatalf("listed after wh_0a %+v %v", list, err)
	}
	if low, ok, err := s.WebhooksThrough(ctx); err != nil || !ok || low != 0 {
		t.Fatalf("lowest cursor %d %v %v, want 0", low, ok, err)
	}

	// a moves to the second past a failure of it, then to the third.
	first := clk.Now()
	clk.Add(time.Minute)
	fail := orders.WebhookFailure{Position: p2, Attempts: 7, LastError: strings.Repeat("x", 2000), FirstAttemptAt: first, FailedAt: clk.Now()}
	if err := s.AdvanceWebhook(ctx, "wh_0a", p2, []orders.WebhookFailure{fail}, relay); err != nil {
		t.Fatal(err)
	}
	// Again (a relay that did not see its commit): nothing moves, nothing twice.
	if err := s.AdvanceWebhook(ctx, "wh_0a", p2, []orders.WebhookFailure{fail}, relay); err != nil {
		t.Fatal(err)
	}
	if err := s.AdvanceWebhook(ctx, "wh_0a", p1, nil, relay); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Webhook(ctx, "wh_0a"); got.Position != p2 {
		t.Fatalf("cursor %d, want %d (never backwards)", got.Position, p2)
	}
	fs, err := s.WebhookFailures(ctx, "wh_0a", 0, 10)
	if err != nil || len(fs) != 1 {
		t.Fatalf("failures %+v %v", fs, err)
	}
	if f := fs[0]; f.EventID != orders.EventID(p2) || f.WebhookID != "wh_0a" || f.Attempts != 7 || len(f.LastError) != 1000 ||
		!f.FirstAttemptAt.Equal(first) || !f.FailedAt.Equal(clk.Now()) {
		t.Fatalf("failure %+v", f)
	}
	if fs, err := s.WebhookFailures(ctx, "wh_0a", p2, 10); err != nil || len(fs) != 0 {
		t.Fatalf("failures after evt_2: %+v %v", fs, err)
	}
	if low, _, _ := s.WebhooksThrough(ctx); low != p2 {
		t.Fatalf("lowest cursor %d, want %d", low, p2)
	}

	// A former relay moves nothing; an endpoint deleted is not found.
	stale := orders.Leader{Name: relay.Name, Token: relay.Token - 1}
	if err := s.AdvanceWebhook(ctx, "wh_0a", p3, nil, stale); !errors.Is(err, orders.ErrStaleLeader) {
		t.Fatalf("a stale relay: %v", err)
	}
	if err := s.DeleteWebhook(ctx, "wh_0a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWebhook(ctx, "wh_0a"); !errors.Is(err, orders.ErrNotFound) {
		t.Fatalf("deleted twice: %v", err)
	}
	if err := s.AdvanceWebhook(ctx, "wh_0a", p3, nil, relay); !errors.Is(err, orders.ErrNotFound) {
		t.Fatalf("advanced a deleted endpoint: %v", err)
	}
	if fs, err := s.WebhookFailures(ctx, "wh_0a", 0, 10); err != nil || len(fs) != 0 {
		t.Fatalf("failures of a deleted endpoint: %+v %v", fs, err)
	}
	if low, ok, _ := s.WebhooksThrough(ctx); !ok || low != p3 {
		t.Fatalf("lowest cursor %d, want %d (b's)", low, p3)
	}

	// Purging every event keeps the last: the feed goes on from it, and b's
	// cursor is not passed by events numbered again from 1.
	if n, err := s.PurgeEvents(ctx, clk.Now().Add(time.Hour), 1<<62, 100, relay); err != nil || n != 2 {
		t.Fatalf("purged %d %v, want 2 (all but the last)", n, err)
	}
	mustRestock(t, s, "A-1", 10, 4)
	if _, err := s.Settle(ctx, relay); err != nil {
		t.Fatal(err)
	}
	if evs, err := s.Events(ctx, p3, 10); err != nil || len(evs) != 1 || evs[0].Seq != 4 {
		t.Fatalf("the feed after b's cursor: %+v %v, want the fourth restock", evs, err)
	}
}

// TestWebhookSwitch: the relay disables an endpoint under its lease (once:
// the first reason and time are kept) and records since when it fails; a
// disabled endpoint reads so, holds no event back from the purge, and an
// admin enables it again, its failing time cleared.
func TestWebhookSwitch(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) { testWebhookSwitch(t, kind) })
	}
}

func testWebhookSwitch(t *testing.T, kind string) {
	s, clk := newHoldStore(t, kind)
	ctx := context.Background()
	for _, id := range []string{"wh_0a", "wh_0b"} {
		if _, err := s.CreateWebhook(ctx, orders.Webhook{ID: id, URL: "https://a.example/", Secret: "whsec_a", CreatedAt: clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AdvanceWebhook(ctx, "wh_0b", 4, nil, relay); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Webhook(ctx, "wh_0a"); err != nil || got.Disabled || got.DisabledAt != nil || got.FailingSince != nil {
		t.Fatalf("a new endpoint: %+v %v", got, err)
	}

	since := clk.Now()
	if err := s.WebhookFailing(ctx, "wh_0a", &since, relay); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Webhook(ctx, "wh_0a"); got.FailingSince == nil || !got.FailingSince.Equal(since) {
		t.Fatalf("failing since %v, want %v", got.FailingSince, since)
	}
	clk.Add(time.Hour)
	gone := clk.Now()
	if err := s.DisableWebhook(ctx, "wh_0a", gone, orders.WebhookGone, relay); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Hour)
	if err := s.DisableWebhook(ctx, "wh_0a", clk.Now(), orders.WebhookFailing, relay); err != nil {
		t.Fatal(err)
	}
	if got, err := s.SwitchWebhook(ctx, "wh_0a", true, clk.Now()); err != nil || !got.Disabled ||
		got.DisabledReason != orders.WebhookGone || !got.DisabledAt.Equal(gone) {
		t.Fatalf("disabled twice more: %+v %v; want the first time and reason kept", got, err)
	}
	if list, err := s.Webhooks(ctx, "", 10); err != nil || len(list) != 2 || !list[0].Disabled || list[1].Disabled {
		t.Fatalf("listed %+v %v", list, err)
	}
	// a (cursor 0) is disabled: b's cursor alone bounds the purge.
	if low, ok, err := s.WebhooksThrough(ctx); err != nil || !ok || low != 4 {
		t.Fatalf("lowest cursor %d %v %v, want 4 (b's)", low, ok, err)
	}

	stale := orders.Leader{Name: relay.Name, Token: relay.Token - 1}
	if err := s.DisableWebhook(ctx, "wh_0b", clk.Now(), orders.WebhookGone, stale); !errors.Is(err, orders.ErrStaleLeader) {
		t.Fatalf("a stale relay disabled: %v", err)
	}
	if err := s.WebhookFailing(ctx, "wh_0b", &since, stale); !errors.Is(err, orders.ErrStaleLeader) {
		t.Fatalf("a stale relay recorded a failure: %v", err)
	}

	got, err := s.SwitchWebhook(ctx, "wh_0a", false, clk.Now())
	if err != nil || got.Disabled || got.DisabledAt != nil || got.DisabledReason != "" || got.FailingSince != nil || got.Position != 0 {
		t.Fatalf("enabled: %+v %v; want served, nothing failing, its cursor kept", got, err)
	}
	if low, _, _ := s.WebhooksThrough(ctx); low != 0 {
		t.Fatalf("lowest cursor %d, want 0 (a's, served again)", low)
	}
	if got, err := s.SwitchWebhook(ctx, "wh_0b", true, clk.Now()); err != nil || got.DisabledReason != orders.WebhookManual || !got.DisabledAt.Equal(clk.Now()) {
		t.Fatalf("disabled by an admin: %+v %v", got, err)
	}
	if err := s.WebhookFailing(ctx, "wh_0a", nil, relay); err != nil {
		t.Fatal(err)
	}
	for _, call := range []error{
		s.DisableWebhook(ctx, "wh_ff", clk.Now(), orders.WebhookGone, relay),
		s.WebhookFailing(ctx, "wh_ff", nil, relay),
		func() error { _, err := s.SwitchWebhook(ctx, "wh_ff", false, clk.Now()); return err }(),
	} {
		if !errors.Is(call, orders.ErrNotFound) {
			t.Errorf("an unknown endpoint: %v, want not found", call)
		}
	}
}
