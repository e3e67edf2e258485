package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/api/apitest"
	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/orders"
	sgclient "github.com/stockguard/stockguard/pkg/client"
)

// The security suite: issue 39's attacks, each from outside, against real
// replicas (three, on one database and one Redis), each as an attacker would
// send it. Every one of them passed before clients and keys existed.

// secClient is a client made through the admin API, with a key.
type secClient struct {
	ID     string
	Secret string
	KeyID  string
}

// makeClient makes a client with scopes (with, when set, its own limits:
// edit changes the request) and one key, through url with pkg/sgclient.
func makeClient(ctx context.Context, t *testing.T, url, name string, scopes []orders.Scope, edit func(*sgclient.APIClientRequest)) secClient {
	t.Helper()
	req := sgclient.APIClientRequest{Name: name}
	for _, s := range scopes {
		req.Scopes = append(req.Scopes, string(s))
	}
	if edit != nil {
		edit(&req)
	}
	api := apiAs(t, url, adminToken)
	c, err := api.CreateClient(ctx, req)
	if err != nil {
		t.Fatalf("client %s: %v", name, err)
	}
	k, err := api.CreateKey(ctx, c.ID)
	if err != nil {
		t.Fatalf("key of %s: %v", name, err)
	}
	if !strings.HasPrefix(k.Secret, "sk_sg_") || len(k.Secret) < 6+22 {
		t.Fatalf("key secret %q: want sk_sg_ and at least 128 bits", k.Secret)
	}
	return secClient{ID: c.ID, Secret: k.Secret, KeyID: k.ID}
}

// apiAs is pkg/client on the replica at url with the bearer secret: what the
// suite sends by the contract goes through it, as a real caller's would; the
// requests that break the contract on purpose (no credential, one in the
// query, every operation at once) go through as.
func apiAs(t *testing.T, url, secret string, opts ...sgclient.Option) *sgclient.Client {
	t.Helper()
	c, err := sgclient.New(url, append([]sgclient.Option{sgclient.WithAPIKey(secret)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// once sends each request once: the answer itself is what is tested.
var once = sgclient.WithRetry(sgclient.RetryPolicy{MaxAttempts: 1})

// problemOf is err's problem, or nil.
func problemOf(err error) *sgclient.Problem {
	var p *sgclient.Problem
	if errors.As(err, &p) {
		return p
	}
	return nil
}

// as sends a request with the key's secret (or none: "") and returns the
// status and body; the request may break the contract (no credential), the
// answer may not.
func as(ctx context.Context, t *testing.T, secret, method, url, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	h := map[string]string{"Authorization": ""}
	if secret != "" {
		h["Authorization"] = "Bearer " + secret
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		h[hdr[i]] = hdr[i+1]
	}
	ct := ""
	if body != "" {
		ct = "application/json"
	}
	status, header, b, err := send(ctx, offContract(client(t)), method, url, body, ct, h)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return status, header, b
}

func problemType(b []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(b, &p)
	_, slug, _ := strings.Cut(p.Type, "#")
	return slug
}

func TestSecuritySuite(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	// Failed authentications are limited per address (TestFailedAuthLimited):
	// here the suite's own 401s must not be cut short by it.
	c := startCluster(t, 3, "STOCKGUARD_LOG_LEVEL=debug", "STOCKGUARD_AUTH_REFRESH=1s", "STOCKGUARD_FAILED_AUTH_BURST=100000")
	sku := "SEC-" + fmt.Sprint(time.Now().UnixNano()%1e9)
	if _, err := apiAs(t, c.urls[0], adminToken).SetStock(ctx, sku, sgclient.SetStockRequest{Available: 1000}); err != nil {
		t.Fatal(err)
	}
	shop := orders.Scopes[:4] // orders:write, orders:read, holds:write, stock:read
	alice := makeClient(ctx, t, c.urls[0], "alice", shop, nil)
	mallory := makeClient(ctx, t, c.urls[1], "mallory", shop, nil)
	reader := makeClient(ctx, t, c.urls[2], "reader", []orders.Scope{orders.ScopeStockRead}, nil)
	secrets := []string{alice.Secret, mallory.Secret, reader.Secret, adminToken}

	t.Run("no credential is 401 on every operation but the open ones", func(t *testing.T) {
		for _, op := range apitest.Operations(t) {
			if op.Open {
				continue
			}
			url := c.urls[1] + op.Sample
			status, hdr, b := as(ctx, t, "", op.Method, url, "{}")
			if status != http.StatusUnauthorized || problemType(b) != "unauthorized" || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s without a credential: %d %q %s", op.Method, op.Path, status, hdr.Get("WWW-Authenticate"), b)
			}
			if status, _, b := as(ctx, t, "sk_sg_"+strings.Repeat("A", 43), op.Method, url, "{}"); status != http.StatusUnauthorized {
				t.Errorf("%s %s with an unknown key: %d %s", op.Method, op.Path, status, b)
			}
		}
	})
	t.Run("a wrong admin token is 401, not 403", func(t *testing.T) {
		if status, _, b := as(ctx, t, "not-"+adminToken, http.MethodGet, c.urls[0]+"/v1/audit", ""); status != http.StatusUnauthorized {
			t.Errorf("wrong admin token: %d %s", status, b)
		}
	})
	t.Run("a key without the scope is 403 naming it, on every operation", func(t *testing.T) {
		scopes := httpapi.RouteScopes()
		for _, op := range apitest.Operations(t) {
			need := scopes[op.Method+" "+op.GinPath]
			if op.Open || slices.Contains(need, orders.ScopeStockRead) {
				continue
			}
			status, _, b := as(ctx, t, reader.Secret, op.Method, c.urls[0]+op.Sample, "{}")
			var p struct {
				Required []orders.Scope `json:"required_scopes"`
			}
			_ = json.Unmarshal(b, &p)
			if status != http.StatusForbidden || problemType(b) != "forbidden" || !slices.Equal(p.Required, need) {
				t.Errorf("%s %s with stock:read only: %d %s, want 403 naming %v", op.Method, op.Path, status, b, need)
			}
		}
	})
	t.Run("a credential in the query string is refused", func(t *testing.T) {
		for _, q := range []string{"access_token=" + alice.Secret, "api_key=" + alice.Secret, "x=" + alice.Secret} {
			if status, _, b := as(ctx, t, alice.Secret, http.MethodGet, c.urls[0]+"/v1/skus/"+sku+"?"+q, ""); status != http.StatusUnauthorized {
				t.Errorf("?%s: %d %s", strings.SplitN(q, "=", 2)[0], status, b)
			}
		}
	})
	t.Run("another client's order and hold are 404 and unchanged", func(t *testing.T) {
		line := []sgclient.Item{{SKU: sku, Quantity: 1}}
		o, err := apiAs(t, c.urls[0], alice.Secret).PlaceOrder(ctx, sgclient.OrderRequest{Items: line})
		if err != nil {
			t.Fatalf("alice's order: %v", err)
		}
		h, err := apiAs(t, c.urls[1], alice.Secret).PlaceHold(ctx, sgclient.HoldRequest{Items: line, TTL: "5m"})
		if err != nil {
			t.Fatalf("alice's hold: %v", err)
		}
		for i, u := range c.urls {
			m := apiAs(t, u, mallory.Secret, once)
			for what, call := range map[string]func() error{
				"GET the order":    func() error { _, err := m.GetOrder(ctx, o.ID); return err },
				"cancel the order": func() error { _, err := m.CancelOrder(ctx, o.ID); return err },
				"GET the hold":     func() error { _, err := m.GetHold(ctx, h.ID); return err },
				"extend the hold":  func() error { _, err := m.ExtendHold(ctx, h.ID, sgclient.ExtendRequest{TTL: "10m"}); return err },
				"confirm the hold": func() error { _, err := m.ConfirmHold(ctx, h.ID, sgclient.ConfirmRequest{}); return err },
				"release the hold": func() error { _, err := m.ReleaseHold(ctx, h.ID); return err },
			} {
				if err := call(); !sgclient.IsNotFound(err) {
					t.Errorf("mallory: %s on replica %d: %v, want 404 not-found", what, i, err)
				}
			}
		}
		op := apiAs(t, c.urls[2], adminToken)
		got, err := op.GetOrder(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		gotHold, err := op.GetHold(ctx, h.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != sgclient.OrderPlaced || gotHold.Status != sgclient.HoldHeld || !gotHold.ExpiresAt.Equal(h.ExpiresAt) {
			t.Errorf("after mallory: order %s, hold %s expiring %s (was %s)", got.Status, gotHold.Status, gotHold.ExpiresAt, h.ExpiresAt)
		}
		// Lists are the caller's own.
		for _, who := range []secClient{mallory, alice} {
			ids, err := listedIDs(ctx, apiAs(t, c.urls[0], who.Secret))
			if err != nil {
				t.Fatal(err)
			}
			if mine := who == alice; ids[o.ID] != mine || ids[h.ID] != mine {
				t.Errorf("%s's lists have alice's order %v and hold %v", who.ID, ids[o.ID], ids[h.ID])
			}
		}
	})
	t.Run("an idempotency key replayed by another client is its own", func(t *testing.T) {
		key := "shared-key-" + sku
		line := sgclient.OrderRequest{Items: []sgclient.Item{{SKU: sku, Quantity: 1}}}
		var r2 sgclient.Response
		o1, err1 := apiAs(t, c.urls[0], alice.Secret).PlaceOrder(ctx, line, sgclient.IdempotencyKey(key))
		o2, err2 := apiAs(t, c.urls[1], mallory.Secret).PlaceOrder(ctx, line, sgclient.IdempotencyKey(key), sgclient.Capture(&r2))
		if err1 != nil || err2 != nil || o1.ID == o2.ID || r2.Replayed {
			t.Errorf("same key, two clients: %v / %v (replayed %v)", err1, err2, r2.Replayed)
		}
		// With another body the other client's key is not "reused" either.
		_, err3 := apiAs(t, c.urls[2], mallory.Secret).PlaceOrder(ctx, sgclient.OrderRequest{Items: []sgclient.Item{{SKU: sku, Quantity: 2}}},
			sgclient.IdempotencyKey(key+"-2"))
		_, err4 := apiAs(t, c.urls[2], alice.Secret).PlaceOrder(ctx, line, sgclient.IdempotencyKey(key+"-2"))
		if err3 != nil || err4 != nil {
			t.Errorf("same key, other bodies: %v / %v", err3, err4)
		}
	})
	t.Run("a revoked key is refused by every replica within 5s", func(t *testing.T) {
		victim := makeClient(ctx, t, c.urls[0], "victim", shop, nil)
		for i, u := range c.urls { // every replica has seen the key
			if _, err := apiAs(t, u, victim.Secret).GetSKU(ctx, sku); err != nil {
				t.Fatalf("replica %d before the revocation: %v", i, err)
			}
		}
		start := time.Now()
		if err := apiAs(t, c.urls[0], adminToken).RevokeKey(ctx, victim.ID, victim.KeyID); err != nil {
			t.Fatalf("revoke: %v", err)
		}
		if _, err := apiAs(t, c.urls[0], victim.Secret, once).GetSKU(ctx, sku); !sgclient.IsUnauthorized(err) {
			t.Errorf("the revoking replica still accepts the key: %v", err)
		}
		var worst time.Duration
		for i, u := range c.urls[1:] {
			refused := false
			for time.Since(start) < 5*time.Second && !refused {
				_, err := apiAs(t, u, victim.Secret, once).GetSKU(ctx, sku)
				refused = sgclient.IsUnauthorized(err)
				if !refused {
					time.Sleep(20 * time.Millisecond) // polling an outside observable: the answer
				}
			}
			if !refused {
				t.Errorf("replica %d still accepts the revoked key after 5s", i+1)
			}
			worst = max(worst, time.Since(start))
		}
		t.Logf("revocation reached every replica within %s", worst.Round(time.Millisecond))
	})
	t.Run("the rate limit is shared by the replicas", func(t *testing.T) {
		const rate, burst = 20.0, 20
		bot := makeClient(ctx, t, c.urls[0], "bot", shop, func(r *sgclient.APIClientRequest) {
			r.RateLimit = &sgclient.RateLimit{PerSecond: rate, Burst: burst}
		})
		var accepted, refused atomic.Int64
		var bad atomic.Value
		start := time.Now()
		var wg sync.WaitGroup
		for w := range 6 { // far more than 20/s: every replica is asked all the time
			wg.Go(func() {
				api := apiAs(t, c.urls[w%3], bot.Secret, once) // a 429 is the answer tested, not one to wait out
				for time.Since(start) < 3*time.Second {
					var r sgclient.Response
					_, err := api.GetSKU(ctx, sku, sgclient.Capture(&r))
					p := problemOf(err)
					switch {
					case err == nil:
						accepted.Add(1)
					case sgclient.IsRateLimited(err) && p.Status == http.StatusTooManyRequests && p.RetryAfter > 0:
						refused.Add(1)
					default:
						bad.Store(fmt.Sprintf("%v (Retry-After %q)", err, r.Header.Get("Retry-After")))
					}
					if r.Header.Get("RateLimit-Policy") == "" || r.Header.Get("RateLimit") == "" {
						bad.Store(fmt.Sprintf("%d without RateLimit-Policy and RateLimit: %v", r.StatusCode, r.Header))
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		if v := bad.Load(); v != nil {
			t.Errorf("an answer off the limit's contract: %s", v)
		}
		limit := rate*elapsed.Seconds() + burst
		t.Logf("over %s and three replicas: %d accepted (rate x time + burst = %.0f), %d refused 429",
			elapsed.Round(time.Millisecond), accepted.Load(), limit, refused.Load())
		if got := float64(accepted.Load()); got > limit*1.15 || got < limit*0.5 || refused.Load() == 0 {
			t.Errorf("%d accepted, %d refused; want at most %.0f (+15%%) and at least half of it", accepted.Load(), refused.Load(), limit)
		}
		// The admin token is not limited, and another client is not slowed by this one.
		if _, err := apiAs(t, c.urls[0], alice.Secret, once).GetSKU(ctx, sku); err != nil {
			t.Errorf("alice after the bot: %v", err)
		}
	})
	t.Run("60 concurrent holds over three replicas take the client's cap, no more", func(t *testing.T) {
		const hoarderCap = 10
		hoarder := makeClient(ctx, t, c.urls[0], "hoarder", shop, func(r *sgclient.APIClientRequest) {
			r.MaxUnitsHeldPerSKU = new(hoarderCap)
		})
		drop := sku + "-DROP"
		op := apiAs(t, c.urls[0], adminToken)
		if _, err := op.SetStock(ctx, drop, sgclient.SetStockRequest{Available: 1000}); err != nil {
			t.Fatal(err)
		}
		statuses := raceAll(ctx, t, c.urls, 60, func(i int) (string, string, string) {
			return hoarder.Secret, "/v1/reservations", `{"items":[{"sku":"` + drop + `","quantity":1}],"ttl":"1h"}`
		}, "hold-quota-exceeded")
		if statuses[http.StatusCreated] != hoarderCap || statuses[http.StatusConflict] != 60-hoarderCap {
			t.Errorf("60 holds at a cap of %d: %v", hoarderCap, statuses)
		}
		st, err := apiAs(t, c.urls[1], adminToken).GetSKU(ctx, drop)
		if err != nil {
			t.Fatal(err)
		}
		if st.Reserved != hoarderCap || st.Available != 1000-hoarderCap {
			t.Errorf("after the race: %+v, want %d reserved", st, hoarderCap)
		}
	})
	t.Run("a customer's units of a limited drop never pass its limit", func(t *testing.T) {
		drop := sku + "-LIMIT2"
		if _, err := apiAs(t, c.urls[0], adminToken).SetStock(ctx, drop, sgclient.SetStockRequest{Available: 1000, MaxPerCustomer: new(2)}); err != nil {
			t.Fatal(err)
		}
		statuses := raceAll(ctx, t, c.urls, 30, func(i int) (string, string, string) {
			path := "/v1/orders"
			if i%2 == 1 {
				path = "/v1/reservations"
			}
			return alice.Secret, path, `{"items":[{"sku":"` + drop + `","quantity":1}],"customer":"bob"}`
		}, "customer-limit-exceeded")
		if statuses[http.StatusCreated] != 2 {
			t.Errorf("30 one-unit orders and holds for one customer at a limit of 2: %v", statuses)
		}
		// Another client's "bob" is another shopper.
		if _, err := apiAs(t, c.urls[2], mallory.Secret).PlaceOrder(ctx,
			sgclient.OrderRequest{Items: []sgclient.Item{{SKU: drop, Quantity: 2}}, Customer: "bob"}); err != nil {
			t.Errorf("mallory's bob: %v", err)
		}
	})
	t.Run("a webhook cannot be aimed inside", func(t *testing.T) {
		// Refused on the guard's decision at registration: no packet is sent
		// to any of these (numbers are read, names looked up in /etc/hosts).
		for _, u := range []string{"http://127.0.0.1:9/", "http://localhost:9/", "http://[::1]:9/", "http://2130706433/",
			"http://0x7f000001/", "http://127.1/", "http://0.0.0.0/", "http://10.0.0.1/", "http://192.168.1.1/",
			"http://169.254.169.254/latest/meta-data/", "http://[fd00::1]/", "http://[::ffff:127.0.0.1]/"} {
			_, err := apiAs(t, c.urls[0], adminToken).CreateWebhook(ctx, sgclient.WebhookRequest{URL: u})
			if p := problemOf(err); !sgclient.IsInvalid(err) || p.Status != http.StatusUnprocessableEntity || len(p.Errors) == 0 || p.Errors[0].Field != "url" {
				t.Errorf("webhook to %s: %v, want 422 invalid on url", u, err)
			}
		}
		for w, err := range apiAs(t, c.urls[1], adminToken).ListWebhooks(ctx, sgclient.ListWebhooksParams{}) {
			t.Errorf("a webhook registered after the refusals: %+v %v", w, err)
		}
	})
	t.Run("no secret in any log line", func(t *testing.T) {
		for i, path := range c.logs {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) == 0 {
				t.Errorf("replica %d wrote no log: the search would prove nothing", i)
			}
			for _, s := range secrets {
				if strings.Contains(string(b), s) {
					t.Errorf("replica %d's log has a secret (%s...)", i, s[:8])
				}
			}
		}
	})
}

// Failed authentications of one source address are limited, every replica
// together: guessing keys is slow, and a flood of bad keys costs little. A
// good key from the same address still gets through.
func TestFailedAuthLimited(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := startCluster(t, 2, "STOCKGUARD_FAILED_AUTH_RATE=1", "STOCKGUARD_FAILED_AUTH_BURST=5")
	var statuses []int
	for i := range 12 {
		status, hdr, _ := as(ctx, t, "sk_sg_guess"+fmt.Sprint(i), http.MethodGet, c.urls[i%2]+"/v1/skus", "")
		statuses = append(statuses, status)
		if status == http.StatusTooManyRequests && hdr.Get("Retry-After") == "" {
			t.Errorf("429 without Retry-After")
		}
	}
	if !slices.Contains(statuses, http.StatusTooManyRequests) || statuses[0] != http.StatusUnauthorized {
		t.Errorf("12 guesses over two replicas: %v, want 401 first and 429 past the burst of 5", statuses)
	}
	if status, _, b := as(ctx, t, adminToken, http.MethodGet, c.urls[0]+"/v1/skus", ""); status != http.StatusOK {
		t.Errorf("the admin token from the same address: %d %s", status, b)
	}
}

// raceAll sends n requests at once, spread over the replicas, each as req(i)
// says (secret, path, body), and counts the answers by status; a 409 must be
// the problem refusal with held and limit.
func raceAll(ctx context.Context, t *testing.T, urls []string, n int, req func(i int) (string, string, string), refusal string) map[int]int {
	t.Helper()
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			secret, path, body := req(i)
			<-start
			status, _, b := as(ctx, t, secret, http.MethodPost, urls[i%len(urls)]+path, body)
			if status == http.StatusConflict {
				var p struct {
					Held, Limit *int64
				}
				_ = json.Unmarshal(b, &p)
				if problemType(b) != refusal || p.Held == nil || p.Limit == nil || *p.Held > *p.Limit {
					t.Errorf("409 %s, want %s with held <= limit", b, refusal)
				}
			}
			mu.Lock()
			statuses[status]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	return statuses
}

// listedIDs are the ids of the orders and holds the caller's lists give.
func listedIDs(ctx context.Context, api *sgclient.Client) (map[string]bool, error) {
	ids := map[string]bool{}
	for o, err := range api.ListOrders(ctx, sgclient.ListOrdersParams{Limit: 100}) {
		if err != nil {
			return nil, err
		}
		ids[o.ID] = true
	}
	for h, err := range api.ListHolds(ctx, sgclient.ListHoldsParams{Limit: 100}) {
		if err != nil {
			return nil, err
		}
		ids[h.ID] = true
	}
	return ids, nil
}
