package jetstream

import (
	"regexp"
	"strings"
	"testing"
)

func TestTokenRoundTrip(t *testing.T) {
	valid := regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	for _, tc := range []struct{ sku, token string }{
		{"SKU-1", "SKU-1"},
		{"abc123", "abc123"},
		{"a.b", "a_2Eb"},
		{"a_b", "a_5Fb"},
		{"_2E", "_5F2E"},
		{".", "_2E"},
		{"..", "_2E_2E"},
		{"-", "-"},
		{"a.b_c-d", "a_2Eb_5Fc-d"},
		{"*", "_2A"},
		{">", "_3E"},
		{"a b", "a_20b"},
		{"é", "_C3_A9"},
	} {
		if got := Token(tc.sku); got != tc.token {
			t.Errorf("Token(%q) = %q, want %q", tc.sku, got, tc.token)
		}
		if !valid.MatchString(Token(tc.sku)) {
			t.Errorf("Token(%q) = %q holds a byte outside [A-Za-z0-9_-]", tc.sku, Token(tc.sku))
		}
		back, err := SKU(tc.token)
		if err != nil || back != tc.sku {
			t.Errorf("SKU(%q) = %q, %v; want %q", tc.token, back, err, tc.sku)
		}
		got, err := SKUOfSubject(Subject(tc.sku))
		if err != nil || got != tc.sku {
			t.Errorf("SKUOfSubject(%q) = %q, %v; want %q", Subject(tc.sku), got, err, tc.sku)
		}
	}
	if got := Subject("a.b"); got != "stockguard.sku.a_2Eb" {
		t.Errorf("Subject(a.b) = %q", got)
	}
}

// Every byte string round-trips, and distinct SKUs get distinct tokens.
func TestTokenAllBytes(t *testing.T) {
	seen := map[string]string{}
	for c := range 256 {
		for _, sku := range []string{string(rune(0)) + "x", "x" + string([]byte{byte(c)}), string([]byte{byte(c), '.', byte(c)})} {
			tok := Token(sku)
			if strings.ContainsAny(tok, ".*> \t\r\n") {
				t.Fatalf("Token(%q) = %q", sku, tok)
			}
			back, err := SKU(tok)
			if err != nil || back != sku {
				t.Fatalf("SKU(Token(%q)) = %q, %v", sku, back, err)
			}
			if other, ok := seen[tok]; ok && other != sku {
				t.Fatalf("%q and %q share token %q", sku, other, tok)
			}
			seen[tok] = sku
		}
	}
}

func TestSKURejects(t *testing.T) {
	for _, tok := range []string{"a.b", "a_", "a_2", "a_2e", "a_zz", "a_41", "a*", "_2D"} {
		if sku, err := SKU(tok); err == nil {
			t.Errorf("SKU(%q) = %q, want an error", tok, sku)
		}
	}
}

func TestRedact(t *testing.T) {
	got := redact("nats://u:secret@a:4222, nats://b:4222")
	if strings.Contains(got, "secret") || !strings.Contains(got, "nats://u:xxxxx@a:4222") || !strings.Contains(got, "nats://b:4222") {
		t.Errorf("redact = %q", got)
	}
}
