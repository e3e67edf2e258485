package jetstream

import (
	"fmt"
	"strings"
)

// SubjectPrefix is the subjects' common part: a SKU's events go to
// SubjectPrefix + "." + Token(sku), and the stream takes SubjectPrefix + ".>".
const SubjectPrefix = "stockguard.sku"

// Subject is the subject of sku's events: stockguard.sku.<Token(sku)>.
func Subject(sku string) string { return SubjectPrefix + "." + Token(sku) }

// Token maps a SKU to one subject token, reversibly (SKU undoes it). A SKU may
// hold '.' (orders' pattern is ^[A-Za-z0-9._-]{1,64}$), which would split
// the token in two, so every byte other than [A-Za-z0-9-] is written as '_'
// and two upper-case hex digits, as URLs escape with '%': "a.b" is "a_2Eb",
// "a_b" is "a_5Fb" ('_' is the escape, so it is escaped too). The usual SKU,
// letters, digits and dashes, is its own token. Any byte string maps to a
// token of those characters only, so no SKU becomes a wildcard ('*', '>') or
// holds a space.
func Token(sku string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(sku))
	for i := 0; i < len(sku); i++ {
		c := sku[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xF])
	}
	return b.String()
}

// SKU is the SKU whose Token is token; it fails on a token Token cannot have
// written (a byte outside [A-Za-z0-9_-], or '_' not followed by two upper-case
// hex digits of a byte Token escapes).
func SKU(token string) (string, error) {
	var b strings.Builder
	b.Grow(len(token))
	for i := 0; i < len(token); i++ {
		c := token[i]
		switch {
		case plain(c):
			b.WriteByte(c)
		case c == '_' && i+2 < len(token) && upperHex(token[i+1]) && upperHex(token[i+2]):
			v := unhex(token[i+1])<<4 | unhex(token[i+2])
			if plain(v) {
				return "", fmt.Errorf("jetstream: token %q escapes %q, which Token leaves as it is", token, v)
			}
			b.WriteByte(v)
			i += 2
		default:
			return "", fmt.Errorf("jetstream: %q is not a SKU's token (byte %d)", token, i)
		}
	}
	return b.String(), nil
}

// SKUOfSubject is the SKU of a subject prefix.<token>: the last token,
// unescaped.
func SKUOfSubject(subject string) (string, error) {
	i := strings.LastIndexByte(subject, '.')
	return SKU(subject[i+1:])
}

func plain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

func upperHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}
