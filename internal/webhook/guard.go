package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"code.dny.dev/ssrf"
)

// A webhook's URL is chosen by whoever registers it, and the service POSTs to
// it from inside the network it runs in: left unchecked, a URL naming
// 127.0.0.1, a private address or the cloud's metadata address
// (169.254.169.254) makes the service a proxy into places its callers cannot
// reach (server-side request forgery, OWASP API7). A Guard refuses such
// addresses twice: when an endpoint is registered (CheckURL: the host, or
// every address its name resolves to), and when each connection is dialled
// (Control, a net.Dialer's Control function, which sees the address actually
// connected to, after resolution: a name that resolved to a public address at
// registration and to a private one now, DNS rebinding, is caught there).
//
// Which addresses are refused is code.dny.dev/ssrf's decision, kept up to
// date with IANA's special-purpose registries: loopback, private, shared
// (100.64.0.0/10), link-local, unique-local, multicast, unspecified,
// documentation and reserved ranges, and every IPv6 address outside global
// unicast. An operator may let networks through (a compose network, a test
// receiver on 127.0.0.0/8): those are checked first.

// ErrAddressRefused says a webhook's host is, or resolves to, an address the
// Guard does not let through; errors.Is finds it in an *AddressError and in
// the transport errors that wrap one. Retrying will not help: the endpoint's
// URL must change, or the operator allow its network.
var ErrAddressRefused = errors.New("webhook: address refused")

// AddressError is a host the Guard refused, and why.
type AddressError struct {
	// Host is the URL's host as written (a name or an address), empty when the
	// dialler's address was refused.
	Host string
	// Addr is the address refused: the host's own, or one it resolved to.
	Addr netip.Addr
	// Kind says what Addr is: "loopback", "private", "link-local",
	// "unique-local", "multicast", "unspecified", "shared (carrier-grade NAT)"
	// or "special-purpose"; "non-standard numeric" for a host written as a
	// number in a form other than dotted decimal whose address is otherwise
	// let through.
	Kind string
	// NonStandard is true when Host is an IPv4 address written in a form
	// other than dotted decimal (2130706433, 0x7f000001, 127.1).
	NonStandard bool
}

// Error says which address was refused and what it is.
func (e *AddressError) Error() string { return ErrAddressRefused.Error() + ": " + e.Reason() }

// Reason says, without the prefix, which address was refused and what it is:
// the words an API answer shows.
func (e *AddressError) Reason() string {
	switch {
	case e.Kind == kindNumeric:
		return fmt.Sprintf("%s is %s written in a non-standard form, which other software may read differently: write %s", e.Host, e.Addr, e.Addr)
	case e.NonStandard:
		return fmt.Sprintf("%s is %s (written in a non-standard form), a%s %s address, not reachable from the outside", e.Host, e.Addr, an(e.Kind), e.Kind)
	case e.Host == "" || e.Host == e.Addr.String():
		return fmt.Sprintf("%s is a%s %s address, not reachable from the outside", e.Addr, an(e.Kind), e.Kind)
	}
	return fmt.Sprintf("%s resolves to %s, a%s %s address, not reachable from the outside", e.Host, e.Addr, an(e.Kind), e.Kind)
}

// Is makes errors.Is(err, ErrAddressRefused) true.
func (e *AddressError) Is(target error) bool { return target == ErrAddressRefused }

// an is the article's ending before a kind: "an unspecified", "a unique-local".
func an(kind string) string {
	if strings.HasPrefix(kind, "un") && !strings.HasPrefix(kind, "uni") {
		return "n"
	}
	return ""
}

const kindNumeric = "non-standard numeric"

// Resolver looks up a host's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DefaultLookupTimeout bounds a registration's lookup of its host's name.
const DefaultLookupTimeout = 3 * time.Second

// Guard decides which addresses a webhook may reach. The zero value is not
// usable; NewGuard makes one. It is safe for concurrent use.
type Guard struct {
	allow    []netip.Prefix
	deny     *ssrf.Guardian
	resolver Resolver
	timeout  time.Duration
}

// NewGuard returns a Guard that refuses every special-purpose address but
// those in allow.
func NewGuard(allow ...netip.Prefix) *Guard {
	return &Guard{allow: allow, deny: ssrf.New(ssrf.WithAnyPort()), resolver: net.DefaultResolver, timeout: DefaultLookupTimeout}
}

// WithResolver returns a copy of g that looks names up with r (tests give
// one that answers from a table, and sends no query).
func (g *Guard) WithResolver(r Resolver) *Guard {
	cp := *g
	cp.resolver = r
	return &cp
}

// Allowed lists the networks let through.
func (g *Guard) Allowed() []netip.Prefix { return append([]netip.Prefix(nil), g.allow...) }

// ParseNetworks reads a comma-separated list of CIDRs ("127.0.0.0/8,
// ::1/128"); blanks around each are ignored, an empty list is none. A CIDR
// with host bits set (10.1.2.3/8) is refused: it is more likely a mistake
// than a way to write 10.0.0.0/8.
func ParseNetworks(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("network %q: %w", f, err)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("network %q has host bits set: did you mean %s?", f, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

// CheckAddr says whether a may be connected to: nil, or an *AddressError.
// An IPv4-mapped IPv6 address (::ffff:127.0.0.1) is judged as the IPv4
// address it carries, and a zone is ignored.
func (g *Guard) CheckAddr(a netip.Addr) error {
	a = a.Unmap().WithZone("")
	for _, p := range g.allow {
		if p.Contains(a) {
			return nil
		}
	}
	if err := g.deny.SafeAddr(a); err != nil {
		return &AddressError{Addr: a, Kind: kind(a)}
	}
	return nil
}

// Control is a net.Dialer's Control function: it refuses a connection to an
// address CheckAddr refuses, before any packet is sent to it, and any network
// but TCP.
func (g *Guard) Control(network, address string, _ syscall.RawConn) error {
	if network != "tcp4" && network != "tcp6" {
		return fmt.Errorf("%w: network %s is not TCP", ErrAddressRefused, network)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q: %w", ErrAddressRefused, address, err)
	}
	return g.CheckAddr(ap.Addr())
}

// Transport returns a copy of base (nil: http.DefaultTransport) that dials
// through the Guard. It uses no proxy: through one, the Guard would judge the
// proxy's address, not the endpoint's.
func (g *Guard) Transport(base *http.Transport) *http.Transport {
	if base == nil {
		base = http.DefaultTransport.(*http.Transport)
	}
	t := base.Clone()
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: g.Control}
	// Every dial goes through d: a TLS dialler of base's would bypass it.
	t.DialContext, t.DialTLSContext = d.DialContext, nil
	t.DialTLS = nil //nolint:staticcheck // deprecated, and still used when set: cleared for the same reason
	t.Proxy = nil
	return t
}

// CheckURL checks an endpoint's URL when it is registered: its host, an
// address or a name, may not be or resolve to an address CheckAddr refuses.
// A name is looked up within the Guard's lookup timeout and ctx, and every
// address it resolves to must pass; one that does not resolve passes (it may
// be registered before its DNS exists), since every connection is checked
// again when dialled. A host written as a number in another form than dotted
// decimal (2130706433, 0x7f000001, 0177.0.0.1, 127.1) is refused: Go does not
// read it as an address, but a proxy or a receiver's software may. A URL
// that does not parse passes: its syntax is not the Guard's to judge.
func (g *Guard) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	return g.CheckHost(ctx, u.Hostname())
}

// CheckHost is CheckURL for a host alone (no brackets around IPv6).
func (g *Guard) CheckHost(ctx context.Context, host string) error {
	if host == "" {
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if err := g.CheckAddr(a); err != nil {
			var ae *AddressError
			if errors.As(err, &ae) {
				ae.Host = host
			}
			return err
		}
		return nil
	}
	if a, ok := legacyIPv4(host); ok {
		var ae *AddressError
		if errors.As(g.CheckAddr(a), &ae) {
			ae.Host, ae.NonStandard = host, true
			return ae
		}
		return &AddressError{Host: host, Addr: a, Kind: kindNumeric, NonStandard: true}
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	addrs, err := g.lookup(ctx, name)
	if err != nil && (name == "localhost" || strings.HasSuffix(name, ".localhost")) {
		// RFC 6761: localhost names are loopback whatever a resolver says.
		addrs, err = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1})}, nil
	}
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if err := g.CheckAddr(a); err != nil {
			var ae *AddressError
			if errors.As(err, &ae) {
				ae.Host = host
			}
			return err
		}
	}
	return nil
}

// checkLiteral is CheckHost for a host that is an address, in any form; a
// name passes, to be judged when dialled.
func (g *Guard) checkLiteral(host string) error {
	if _, err := netip.ParseAddr(host); err != nil {
		if _, ok := legacyIPv4(host); !ok {
			return nil
		}
	}
	return g.CheckHost(context.Background(), host)
}

func (g *Guard) lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	return g.resolver.LookupNetIP(ctx, "ip", name)
}

// legacyIPv4 reads the forms of an IPv4 address that inet_aton takes and
// dotted decimal does not: one to four parts, each decimal, octal (a leading
// 0) or hexadecimal (0x), the last filling the bytes left (127.1 is
// 127.0.0.1, 2130706433 too).
func legacyIPv4(host string) (netip.Addr, bool) {
	parts := strings.Split(host, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		base, digits := 10, p
		switch {
		case len(p) > 1 && (p[:2] == "0x" || p[:2] == "0X"):
			base, digits = 16, p[2:]
			if digits == "" {
				digits = "0"
			}
		case len(p) > 1 && p[0] == '0':
			base, digits = 8, p[1:]
		}
		v, err := strconv.ParseUint(digits, base, 32)
		if p == "" || err != nil {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	var n uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 0xff {
			return netip.Addr{}, false
		}
		n |= v << (24 - 8*i)
	}
	last := vals[len(vals)-1]
	if last >= 1<<(32-8*(len(vals)-1)) {
		return netip.Addr{}, false
	}
	n |= last
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

// The networks kind names that netip has no method for.
var (
	sharedV4    = netip.MustParsePrefix("100.64.0.0/10")
	uniqueLocal = netip.MustParsePrefix("fc00::/7")
)

// kind says what a refused address is, for the reason given; which are
// refused is ssrf's decision, not this.
func kind(a netip.Addr) string {
	switch {
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case sharedV4.Contains(a):
		return "shared (carrier-grade NAT)"
	case uniqueLocal.Contains(a):
		return "unique-local"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast():
		return "multicast"
	}
	return "special-purpose"
}
