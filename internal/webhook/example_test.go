package webhook_test

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/stockguard/stockguard/internal/webhook"
)

// Sign the specification's test vector: the value of the webhook-signature
// header.
func ExampleSign() {
	sig, err := webhook.Sign(
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"msg_p5jXN8AQM9LWM0D4loKWxJek",
		time.Unix(1614265330, 0),
		[]byte(`{"test": 2432232314}`),
	)
	fmt.Println(sig, err)
	// Output: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= <nil>
}

// Verify a received webhook, as a receiver's handler would with r.Header and
// the body it read; a body changed on the way fails.
func ExampleVerify() {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	sent := time.Unix(1614265330, 0)
	body := []byte(`{"test": 2432232314}`)
	sig, _ := webhook.Sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", sent, body)
	header := http.Header{}
	header.Set(webhook.HeaderID, "msg_p5jXN8AQM9LWM0D4loKWxJek")
	header.Set(webhook.HeaderTimestamp, strconv.FormatInt(sent.Unix(), 10))
	header.Set(webhook.HeaderSignature, sig)

	received := sent.Add(3 * time.Second) // the receiver's clock
	fmt.Println(webhook.Verify(secret, header, body, received, 5*time.Minute))
	fmt.Println(webhook.Verify(secret, header, []byte(`{"test": 1}`), received, 5*time.Minute))
	fmt.Println(webhook.Verify(secret, header, body, sent.Add(time.Hour), 5*time.Minute) != nil)
	// Output:
	// <nil>
	// webhook: no matching signature
	// true
}

// Schedule retries: the relay asks the policy after each failed attempt.
func ExamplePolicy_Next() {
	p := webhook.Policy{
		First: time.Second, Max: 8 * time.Second, For: 20 * time.Second,
		Rand: func() float64 { return 0.5 }, // a fixed draw, for the example
	}
	first := time.Unix(0, 0)
	now := first
	for attempt := 1; ; attempt++ {
		wait, giveUp := p.Next(attempt, first, now)
		if giveUp {
			fmt.Printf("attempt %d failed at %s: give up\n", attempt, now.Sub(first))
			return
		}
		fmt.Printf("attempt %d failed: retry in %s\n", attempt, wait)
		now = now.Add(wait)
	}
	// Output:
	// attempt 1 failed: retry in 750ms
	// attempt 2 failed: retry in 1.5s
	// attempt 3 failed: retry in 3s
	// attempt 4 failed: retry in 6s
	// attempt 5 failed: retry in 6s
	// attempt 6 failed: retry in 2.75s
	// attempt 7 failed at 20s: give up
}
