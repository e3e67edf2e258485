package main

import (
	"context"
	"encoding/json"
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

// makeClient makes a client with scopes (and, in extra, JSON fields of its
// own such as "max_units_held_per_sku") and one key, through url.
func makeClient(ctx context.Context, t *testing.T, url, name string, scopes []orders.Scope, extra string) secClient {
	t.Helper()
	sc, _ := json.Marshal(scopes)
	body := fmt.Sprintf(`{"name":%q,"scopes":%s%s}`, name, sc, extra)
	var c struct {
		ID string `json:"id"`
	}
	admin(ctx, t, http.MethodPost, url+"/v1/clients", body, &c)
	var k struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	admin(ctx, t, http.MethodPost, url+"/v1/clients/"+c.ID+"/keys", "", &k)
	if !strings.HasPrefix(k.Secret, "sk_sg_") || len(k.Secret) < 6+22 {
		t.Fatalf("key secret %q: want sk_sg_ and at least 128 bits", k.Secret)
	}
	return secClient{ID: c.ID, Secret: k.Secret, KeyID: k.ID}
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
	admin(ctx, t, http.MethodPut, c.urls[0]+"/v1/skus/"+sku, `{"available":1000}`, nil)
	shop := orders.Scopes[:4] // orders:write, orders:read, holds:write, stock:read
	alice := makeClient(ctx, t, c.urls[0], "alice", shop, "")
	mallory := makeClient(ctx, t, c.urls[1], "mallory", shop, "")
	reader := makeClient(ctx, t, c.urls[2], "reader", []orders.Scope{orders.ScopeStockRead}, "")
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
		status, _, b := as(ctx, t, alice.Secret, http.MethodPost, c.urls[0]+"/v1/orders", `{"items":[{"sku":"`+sku+`","quantity":1}]}`)
		if status != http.StatusCreated {
			t.Fatalf("alice's order: %d %s", status, b)
		}
		var o orders.Order
		_ = json.Unmarshal(b, &o)
		status, _, b = as(ctx, t, alice.Secret, http.MethodPost, c.urls[1]+"/v1/reservations", `{"items":[{"sku":"`+sku+`","quantity":1}],"ttl":"5m"}`)
		if status != http.StatusCreated {
			t.Fatalf("alice's hold: %d %s", status, b)
		}
		var h orders.Reservation
		_ = json.Unmarshal(b, &h)
		for _, r := range []struct{ method, path, body string }{
			{http.MethodGet, "/v1/orders/" + o.ID, ""},
			{http.MethodPost, "/v1/orders/" + o.ID + "/cancel", ""},
			{http.MethodGet, "/v1/reservations/" + h.ID, ""},
			{http.MethodPost, "/v1/reservations/" + h.ID + "/extend", `{"ttl":"10m"}`},
			{http.MethodPost, "/v1/reservations/" + h.ID + "/confirm", ""},
			{http.MethodPost, "/v1/reservations/" + h.ID + "/release", ""},
		} {
			for i, u := range c.urls {
				status, _, b := as(ctx, t, mallory.Secret, r.method, u+r.path, r.body)
				if status != http.StatusNotFound || problemType(b) != "not-found" {
					t.Errorf("mallory %s %s on replica %d: %d %s, want 404", r.method, r.path, i, status, b)
				}
			}
		}
		var got orders.Order
		admin(ctx, t, http.MethodGet, c.urls[2]+"/v1/orders/"+o.ID, "", &got)
		var gotHold orders.Reservation
		admin(ctx, t, http.MethodGet, c.urls[2]+"/v1/reservations/"+h.ID, "", &gotHold)
		if got.Status != orders.StatusPlaced || gotHold.Status != orders.HoldHeld || !gotHold.ExpiresAt.Equal(h.ExpiresAt) {
			t.Errorf("after mallory: order %s, hold %s expiring %s (was %s)", got.Status, gotHold.Status, gotHold.ExpiresAt, h.ExpiresAt)
		}
		// Lists are the caller's own.
		for _, path := range []string{"/v1/orders?limit=100", "/v1/reservations?limit=100"} {
			status, _, b := as(ctx, t, mallory.Secret, http.MethodGet, c.urls[0]+path, "")
			if status != http.StatusOK || strings.Contains(string(b), o.ID) || strings.Contains(string(b), h.ID) {
				t.Errorf("mallory lists %s: %d %s", path, status, b)
			}
			status, _, b = as(ctx, t, alice.Secret, http.MethodGet, c.urls[0]+path, "")
			if status != http.StatusOK || !strings.Contains(string(b), o.ID) && !strings.Contains(string(b), h.ID) {
				t.Errorf("alice lists %s: %d %s", path, status, b)
			}
		}
	})
	t.Run("an idempotency key replayed by another client is its own", func(t *testing.T) {
		key := "shared-key-" + sku
		body := `{"items":[{"sku":"` + sku + `","quantity":1}]}`
		s1, _, b1 := as(ctx, t, alice.Secret, http.MethodPost, c.urls[0]+"/v1/orders", body, "Idempotency-Key", key)
		s2, h2, b2 := as(ctx, t, mallory.Secret, http.MethodPost, c.urls[1]+"/v1/orders", body, "Idempotency-Key", key)
		var o1, o2 orders.Order
		_, _ = json.Unmarshal(b1, &o1), json.Unmarshal(b2, &o2)
		if s1 != http.StatusCreated || s2 != http.StatusCreated || o1.ID == o2.ID || h2.Get("Idempotent-Replayed") != "" {
			t.Errorf("same key, two clients: %d %s / %d %s (replayed %q)", s1, b1, s2, b2, h2.Get("Idempotent-Replayed"))
		}
		// With another body the other client's key is not "reused" either.
		s3, _, b3 := as(ctx, t, mallory.Secret, http.MethodPost, c.urls[2]+"/v1/orders", `{"items":[{"sku":"`+sku+`","quantity":2}]}`,
			"Idempotency-Key", key+"-2")
		s4, _, b4 := as(ctx, t, alice.Secret, http.MethodPost, c.urls[2]+"/v1/orders", body, "Idempotency-Key", key+"-2")
		if s3 != http.StatusCreated || s4 != http.StatusCreated {
			t.Errorf("same key, other bodies: %d %s / %d %s", s3, b3, s4, b4)
		}
	})
	t.Run("a revoked key is refused by every replica within 5s", func(t *testing.T) {
		victim := makeClient(ctx, t, c.urls[0], "victim", shop, "")
		for i, u := range c.urls { // every replica has seen the key
			if status, _, b := as(ctx, t, victim.Secret, http.MethodGet, u+"/v1/skus/"+sku, ""); status != http.StatusOK {
				t.Fatalf("replica %d before the revocation: %d %s", i, status, b)
			}
		}
		start := time.Now()
		status, _, b := as(ctx, t, adminToken, http.MethodDelete, c.urls[0]+"/v1/clients/"+victim.ID+"/keys/"+victim.KeyID, "")
		if status != http.StatusNoContent {
			t.Fatalf("revoke: %d %s", status, b)
		}
		if status, _, _ := as(ctx, t, victim.Secret, http.MethodGet, c.urls[0]+"/v1/skus/"+sku, ""); status != http.StatusUnauthorized {
			t.Errorf("the revoking replica still accepts the key: %d", status)
		}
		var worst time.Duration
		for i, u := range c.urls[1:] {
			refused := false
			for time.Since(start) < 5*time.Second && !refused {
				status, _, _ := as(ctx, t, victim.Secret, http.MethodGet, u+"/v1/skus/"+sku, "")
				refused = status == http.StatusUnauthorized
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
		bot := makeClient(ctx, t, c.urls[0], "bot", shop, fmt.Sprintf(`,"rate_limit":{"per_second":%g,"burst":%d}`, rate, burst))
		var accepted, refused atomic.Int64
		var bad atomic.Value
		start := time.Now()
		var wg sync.WaitGroup
		for w := range 6 { // far more than 20/s: every replica is asked all the time
			wg.Go(func() {
				for time.Since(start) < 3*time.Second {
					status, hdr, b := as(ctx, t, bot.Secret, http.MethodGet, c.urls[w%3]+"/v1/skus/"+sku, "")
					switch {
					case status == http.StatusOK:
						accepted.Add(1)
					case status == http.StatusTooManyRequests && problemType(b) == "rate-limited" && hdr.Get("Retry-After") != "":
						refused.Add(1)
					default:
						bad.Store(fmt.Sprintf("%d %q %s", status, hdr.Get("Retry-After"), b))
					}
					if hdr.Get("RateLimit-Policy") == "" || hdr.Get("RateLimit") == "" {
						bad.Store(fmt.Sprintf("%d without RateLimit-Policy and RateLimit: %v", status, hdr))
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
		if status, _, b := as(ctx, t, alice.Secret, http.MethodGet, c.urls[0]+"/v1/skus/"+sku, ""); status != http.StatusOK {
			t.Errorf("alice after the bot: %d %s", status, b)
		}
	})
	t.Run("60 concurrent holds over three replicas take the client's cap, no more", func(t *testing.T) {
		const hoarderCap = 10
		hoarder := makeClient(ctx, t, c.urls[0], "hoarder", shop, fmt.Sprintf(`,"max_units_held_per_sku":%d`, hoarderCap))
		drop := sku + "-DROP"
		admin(ctx, t, http.MethodPut, c.urls[0]+"/v1/skus/"+drop, `{"available":1000}`, nil)
		statuses := raceAll(ctx, t, c.urls, 60, func(i int) (string, string, string) {
			return hoarder.Secret, "/v1/reservations", `{"items":[{"sku":"` + drop + `","quantity":1}],"ttl":"1h"}`
		}, "hold-quota-exceeded")
		if statuses[http.StatusCreated] != hoarderCap || statuses[http.StatusConflict] != 60-hoarderCap {
			t.Errorf("60 holds at a cap of %d: %v", hoarderCap, statuses)
		}
		var st orders.Stock
		admin(ctx, t, http.MethodGet, c.urls[1]+"/v1/skus/"+drop, "", &st)
		if st.Held != hoarderCap || st.Available != 1000-hoarderCap {
			t.Errorf("after the race: %+v, want %d reserved", st, hoarderCap)
		}
	})
	t.Run("a customer's units of a limited drop never pass its limit", func(t *testing.T) {
		drop := sku + "-LIMIT2"
		admin(ctx, t, http.MethodPut, c.urls[0]+"/v1/skus/"+drop, `{"available":1000,"max_per_customer":2}`, nil)
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
		if status, _, b := as(ctx, t, mallory.Secret, http.MethodPost, c.urls[2]+"/v1/orders",
			`{"items":[{"sku":"`+drop+`","quantity":2}],"customer":"bob"}`); status != http.StatusCreated {
			t.Errorf("mallory's bob: %d %s", status, b)
		}
	})
	t.Run("a webhook cannot be aimed inside", func(t *testing.T) {
		// Refused on the guard's decision at registration: no packet is sent
		// to any of these (numbers are read, names looked up in /etc/hosts).
		for _, u := range []string{"http://127.0.0.1:9/", "http://localhost:9/", "http://[::1]:9/", "http://2130706433/",
			"http://0x7f000001/", "http://127.1/", "http://0.0.0.0/", "http://10.0.0.1/", "http://192.168.1.1/",
			"http://169.254.169.254/latest/meta-data/", "http://[fd00::1]/", "http://[::ffff:127.0.0.1]/"} {
			status, _, b := as(ctx, t, adminToken, http.MethodPost, c.urls[0]+"/v1/webhooks", `{"url":"`+u+`"}`)
			if status != http.StatusUnprocessableEntity || problemType(b) != "invalid" || !strings.Contains(string(b), `"field":"url"`) {
				t.Errorf("webhook to %s: %d %s, want 422 invalid on url", u, status, b)
			}
		}
		var list struct {
			Data []json.RawMessage `json:"data"`
		}
		admin(ctx, t, http.MethodGet, c.urls[1]+"/v1/webhooks?limit=100", "", &list)
		if len(list.Data) != 0 {
			t.Errorf("%d webhooks registered after the refusals", len(list.Data))
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
