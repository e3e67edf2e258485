package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stockguard/stockguard/internal/webhook"
)

// loopback lets the tests' receivers, on 127.0.0.0/8 and ::1, through the
// Guard that every Sender dials through: the default refuses them.
var loopback = webhook.NewGuard(netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"))

// names is a Resolver that answers from a table and sends no query: the
// Guard's decisions on names are tested without any DNS.
type names map[string][]string

func (n names) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := n[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	out := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		out[i] = netip.MustParseAddr(a)
	}
	return out, nil
}

var table = names{
	"localhost":        {"127.0.0.1", "::1"},
	"erp.example.com":  {"93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"},
	"rebound.example":  {"93.184.215.14", "10.0.0.7"}, // one address inside is enough to refuse
	"metadata.example": {"169.254.169.254"},
}

// TestGuardRefusesAddressesInside: the Guard's decision on a table of URLs
// (CheckURL, as at registration, names answered by a table), never by
// dialling them.
func TestGuardRefusesAddressesInside(t *testing.T) {
	g := webhook.NewGuard().WithResolver(table)
	for _, tc := range []struct {
		url  string
		kind string // "" when let through
	}{
		{"http://localhost/hook", "loopback"},
		{"http://LOCALHOST./hook", "loopback"},
		{"http://127.0.0.1/", "loopback"},
		{"http://127.8.9.10:8080/", "loopback"},
		{"http://[::1]/", "loopback"},
		{"http://0.0.0.0/", "unspecified"},
		{"http://[::]/", "unspecified"},
		{"http://10.0.0.1/", "private"},
		{"http://192.168.1.1/", "private"},
		{"http://172.16.0.1/", "private"},
		{"http://172.31.255.255/", "private"},
		{"http://100.64.0.1/", "shared (carrier-grade NAT)"},
		{"http://169.254.169.254/latest/meta-data/", "link-local"},
		{"http://metadata.example/", "link-local"},
		{"http://[fe80::1]/", "link-local"},
		{"http://[fe80::1%25eth0]/", "link-local"},
		{"http://[fc00::1]/", "unique-local"},
		{"http://[fd12:3456::1]/", "unique-local"},
		{"http://[::ffff:127.0.0.1]/", "loopback"},
		{"http://[::ffff:10.0.0.1]/", "private"},
		{"http://224.0.0.1/", "multicast"},
		{"http://[ff02::1]/", "multicast"},
		{"http://192.0.2.1/", "special-purpose"},
		{"http://2130706433/", "loopback"},
		{"http://0x7f000001/", "loopback"},
		{"http://0177.0.0.1/", "loopback"},
		{"http://127.1/", "loopback"},
		{"http://0x08080808/", "non-standard numeric"},
		{"http://rebound.example/", "private"},
		{"https://erp.example.com/hook", ""},
		{"https://93.184.215.14/hook", ""},
		{"https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/", ""},
		{"https://unknown.example/", ""}, // not resolvable now: checked when dialled
	} {
		t.Run(tc.url, func(t *testing.T) {
			err := g.CheckURL(t.Context(), tc.url)
			if tc.kind == "" {
				if err != nil {
					t.Fatalf("CheckURL: %v, want it let through", err)
				}
				return
			}
			var ae *webhook.AddressError
			if !errors.As(err, &ae) || !errors.Is(err, webhook.ErrAddressRefused) {
				t.Fatalf("CheckURL: %v (%T), want an *AddressError", err, err)
			}
			if ae.Kind != tc.kind || !strings.Contains(ae.Reason(), strings.TrimSuffix(tc.kind, " numeric")) {
				t.Fatalf("CheckURL: kind %q (%s), want %q", ae.Kind, ae.Reason(), tc.kind)
			}
		})
	}
}

// TestGuardAllowsNetworks: a network allowed is let through, by address, by
// name and as an IPv4-mapped address, and nothing else is.
func TestGuardAllowsNetworks(t *testing.T) {
	allow, err := webhook.ParseNetworks(" 127.0.0.0/8, ::1/128 ,10.1.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	g := webhook.NewGuard(allow...).WithResolver(table)
	for _, u := range []string{"http://127.0.0.1:9/", "http://localhost/", "http://[::1]/", "http://[::ffff:127.0.0.1]/", "http://10.1.2.3/"} {
		if err := g.CheckURL(t.Context(), u); err != nil {
			t.Errorf("%s: %v, want it allowed", u, err)
		}
	}
	for _, u := range []string{"http://10.2.0.1/", "http://169.254.169.254/", "http://[fc00::1]/", "http://2130706433/"} {
		if err := g.CheckURL(t.Context(), u); !errors.Is(err, webhook.ErrAddressRefused) {
			t.Errorf("%s: %v, want it refused", u, err)
		}
	}
}

func TestParseNetworks(t *testing.T) {
	if got, err := webhook.ParseNetworks(""); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v %v", got, err)
	}
	for _, bad := range []string{"127.0.0.1", "10.0.0.0/33", "nonsense/8", "10.1.2.3/8", "::1/129"} {
		if _, err := webhook.ParseNetworks("127.0.0.0/8," + bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestGuardControl: the dialler's check, on the addresses it is given
// (after resolution), without any connection.
func TestGuardControl(t *testing.T) {
	g := webhook.NewGuard(netip.MustParsePrefix("127.0.0.0/8"))
	for _, tc := range []struct {
		network, address string
		ok               bool
	}{
		{"tcp4", "127.0.0.1:8080", true},
		{"tcp4", "93.184.215.14:443", true},
		{"tcp6", "[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:443", true},
		{"tcp6", "[::1]:80", false}, // 127.0.0.0/8 only
		{"tcp4", "10.0.0.1:80", false},
		{"tcp4", "169.254.169.254:80", false},
		{"tcp4", "0.0.0.0:80", false},
		{"tcp6", "[fe80::1%eth0]:80", false},
		{"tcp6", "[::ffff:192.168.1.1]:80", false},
		{"udp4", "93.184.215.14:53", false},
	} {
		err := g.Control(tc.network, tc.address, nil)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, webhook.ErrAddressRefused)) {
			t.Errorf("Control(%s, %s): %v, want ok=%v", tc.network, tc.address, err, tc.ok)
		}
	}
}

// TestSendRefusesLoopbackByDefault: a Sender without an allow-list never
// connects to a receiver on loopback, whether the URL names the address or a
// name that resolves to it when dialled (as after DNS rebinding: the check
// is on the address dialled); with 127.0.0.0/8 allowed it delivers.
func TestSendRefusesLoopbackByDefault(t *testing.T) {
	var got atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { got.Add(1) }))
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndexByte(srv.URL, ':'):]
	secret := newSecret(t)
	msg := webhook.Message{ID: "evt_1", Body: []byte(`{}`)}

	strict := webhook.NewSender(srv.Client(), webhook.SenderOptions{})
	for _, u := range []string{srv.URL, "http://localhost" + port, "http://2130706433" + port} {
		err := strict.Send(t.Context(), webhook.Endpoint{URL: u, Secret: secret}, msg)
		var ne *webhook.NetworkError
		if !errors.Is(err, webhook.ErrAddressRefused) || !errors.As(err, &ne) || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("Send to %s: %v, want a *NetworkError refusing a loopback address", u, err)
		}
	}
	if n := got.Load(); n != 0 {
		t.Fatalf("the receiver got %d requests through a Guard that allows nothing", n)
	}
	allowed := webhook.NewSender(nil, webhook.SenderOptions{Guard: webhook.NewGuard(netip.MustParsePrefix("127.0.0.0/8"))})
	if err := allowed.Send(t.Context(), webhook.Endpoint{URL: srv.URL, Secret: secret}, msg); err != nil {
		t.Fatalf("Send with 127.0.0.0/8 allowed: %v", err)
	}
	if n := got.Load(); n != 1 {
		t.Fatalf("the receiver got %d requests, want 1", n)
	}
}
