package webhook_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/webhook"
)

// The Standard Webhooks specification's test vector (its libraries' signing
// test): a receiver written against any of them verifies what we sign.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorMsgID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorUnix      = 1614265330
	vectorPayload   = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignVector(t *testing.T) {
	got, err := webhook.Sign(vectorSecret, vectorMsgID, time.Unix(vectorUnix, 0), []byte(vectorPayload))
	if err != nil {
		t.Fatal(err)
	}
	if got != vectorSignature {
		t.Fatalf("Sign = %q, want %q", got, vectorSignature)
	}
	// Sub-second parts are not signed: the header carries whole seconds.
	got, err = webhook.Sign(vectorSecret, vectorMsgID, time.Unix(vectorUnix, 999_999_999), []byte(vectorPayload))
	if err != nil || got != vectorSignature {
		t.Fatalf("Sign with nanoseconds = %q, %v; want %q", got, err, vectorSignature)
	}
}

func TestSignRejects(t *testing.T) {
	for _, tc := range []struct {
		name, secret, id string
		want             error
	}{
		{"no prefix", strings.TrimPrefix(vectorSecret, "whsec_"), vectorMsgID, webhook.ErrInvalidSecret},
		{"not base64", "whsec_***", vectorMsgID, webhook.ErrInvalidSecret},
		{"too short", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 23)), vectorMsgID, webhook.ErrInvalidSecret},
		{"too long", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65)), vectorMsgID, webhook.ErrInvalidSecret},
		{"empty id", vectorSecret, "", webhook.ErrInvalidMessageID},
		{"id with a full stop", vectorSecret, "msg.1", webhook.ErrInvalidMessageID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := webhook.Sign(tc.secret, tc.id, time.Unix(vectorUnix, 0), nil); !errors.Is(err, tc.want) {
				t.Fatalf("Sign: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestNewSecret(t *testing.T) {
	a, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatalf("two secrets are the same: %q", a)
	}
	for _, s := range []string{a, b} {
		if err := webhook.ValidateSecret(s); err != nil {
			t.Fatalf("ValidateSecret(%q): %v", s, err)
		}
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, webhook.SecretPrefix))
		if !strings.HasPrefix(s, webhook.SecretPrefix) || err != nil || len(key) != 32 {
			t.Fatalf("secret %q: want whsec_ and the base64 of 32 bytes (%d bytes, %v)", s, len(key), err)
		}
	}
}

// signed returns the headers of the vector's message signed at ts.
func signed(t *testing.T, ts time.Time, body string) http.Header {
	t.Helper()
	sig, err := webhook.Sign(vectorSecret, vectorMsgID, ts, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(webhook.HeaderID, vectorMsgID)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(webhook.HeaderSignature, sig)
	return h
}

func TestVerify(t *testing.T) {
	now := time.Unix(vectorUnix, 0)
	const tol = 5 * time.Minute
	other, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		secret string
		header func(h http.Header)
		body   string
		now    time.Time
		want   error // nil: verifies
	}{
		{name: "valid", now: now},
		{name: "valid at the tolerance's edge, old", now: now.Add(tol)},
		{name: "valid at the tolerance's edge, new", now: now.Add(-tol)},
		{name: "tampered body", body: `{"test": 2432232315}`, now: now, want: webhook.ErrNoMatchingSignature},
		{name: "other secret", secret: other, now: now, want: webhook.ErrNoMatchingSignature},
		{name: "other id", header: func(h http.Header) { h.Set(webhook.HeaderID, "msg_other") }, now: now, want: webhook.ErrNoMatchingSignature},
		{name: "timestamp changed", header: func(h http.Header) { h.Set(webhook.HeaderTimestamp, strconv.Itoa(vectorUnix+1)) }, now: now, want: webhook.ErrNoMatchingSignature},
		{name: "too old", now: now.Add(tol + time.Second), want: webhook.ErrTimestampOutOfTolerance},
		{name: "too new", now: now.Add(-tol - time.Second), want: webhook.ErrTimestampOutOfTolerance},
		{name: "no id", header: func(h http.Header) { h.Del(webhook.HeaderID) }, now: now, want: webhook.ErrMissingHeaders},
		{name: "no timestamp", header: func(h http.Header) { h.Del(webhook.HeaderTimestamp) }, now: now, want: webhook.ErrMissingHeaders},
		{name: "no signature", header: func(h http.Header) { h.Del(webhook.HeaderSignature) }, now: now, want: webhook.ErrMissingHeaders},
		{name: "timestamp not a number", header: func(h http.Header) { h.Set(webhook.HeaderTimestamp, "soon") }, now: now, want: webhook.ErrInvalidTimestamp},
		{name: "a list with the valid one among others", header: func(h http.Header) {
			h.Set(webhook.HeaderSignature, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v1a,"+strings.TrimPrefix(vectorSignature, "v1,")+" junk "+h.Get(webhook.HeaderSignature))
		}, now: now},
		{name: "the right bytes under another version", header: func(h http.Header) {
			h.Set(webhook.HeaderSignature, "v2,"+strings.TrimPrefix(vectorSignature, "v1,"))
		}, now: now, want: webhook.ErrNoMatchingSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := signed(t, time.Unix(vectorUnix, 0), vectorPayload)
			if tc.header != nil {
				tc.header(h)
			}
			secret, body := vectorSecret, vectorPayload
			if tc.secret != "" {
				secret = tc.secret
			}
			if tc.body != "" {
				body = tc.body
			}
			err := webhook.Verify(secret, h, []byte(body), tc.now, tol)
			if tc.want == nil && err != nil {
				t.Fatalf("Verify: %v, want nil", err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Verify: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestVerifyDefaultTolerance(t *testing.T) {
	h := signed(t, time.Unix(vectorUnix, 0), vectorPayload)
	at := time.Unix(vectorUnix, 0)
	if err := webhook.Verify(vectorSecret, h, []byte(vectorPayload), at.Add(webhook.DefaultTolerance), 0); err != nil {
		t.Fatalf("at the default tolerance: %v", err)
	}
	if err := webhook.Verify(vectorSecret, h, []byte(vectorPayload), at.Add(webhook.DefaultTolerance+time.Second), 0); !errors.Is(err, webhook.ErrTimestampOutOfTolerance) {
		t.Fatalf("past the default tolerance: %v, want ErrTimestampOutOfTolerance", err)
	}
}
