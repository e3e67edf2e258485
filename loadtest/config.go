package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
)

var prefixRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,40}$`)

// Duration is a time.Duration that reads "30s" in JSON and YAML.
type Duration time.Duration

// UnmarshalText reads a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// Stage is one step of a ramping executor: reach Target (VUs or iterations per
// time unit) linearly over Duration.
type Stage struct {
	Duration Duration `json:"duration" yaml:"duration"`
	Target   int      `json:"target" yaml:"target"`
}

// Executor names, as k6 defines them.
const (
	ConstantVUs         = "constant-vus"
	RampingVUs          = "ramping-vus"
	ConstantArrivalRate = "constant-arrival-rate"
	RampingArrivalRate  = "ramping-arrival-rate"
)

// Scenario is one workload run by one executor.
type Scenario struct {
	Executor string `json:"executor" yaml:"executor"`
	// constant-vus
	VUs      int      `json:"vus,omitempty" yaml:"vus,omitempty"`
	Duration Duration `json:"duration,omitempty" yaml:"duration,omitempty"`
	// ramping-vus
	StartVUs int     `json:"startVUs,omitempty" yaml:"startVUs,omitempty"`
	Stages   []Stage `json:"stages,omitempty" yaml:"stages,omitempty"`
	// arrival-rate executors
	Rate            int      `json:"rate,omitempty" yaml:"rate,omitempty"`
	StartRate       int      `json:"startRate,omitempty" yaml:"startRate,omitempty"`
	TimeUnit        Duration `json:"timeUnit,omitempty" yaml:"timeUnit,omitempty"`
	PreAllocatedVUs int      `json:"preAllocatedVUs,omitempty" yaml:"preAllocatedVUs,omitempty"`
	MaxVUs          int      `json:"maxVUs,omitempty" yaml:"maxVUs,omitempty"`
	StartTime       Duration `json:"startTime,omitempty" yaml:"startTime,omitempty"`

	Workload Workload `json:"workload" yaml:"workload"`
}

// Workload is what one iteration does.
type Workload struct {
	// SKUs is how many SKUs orders spread over: 1 is one hot SKU.
	SKUs int `json:"skus" yaml:"skus"`
	// Popularity spreads orders over the SKUs: uniform or zipf.
	Popularity string `json:"popularity,omitempty" yaml:"popularity,omitempty"`
	// Stock per SKU, seeded in setup.
	Stock int `json:"stock" yaml:"stock"`
	// MaxQuantity per line; quantities are uniform in 1..MaxQuantity.
	MaxQuantity int `json:"maxQuantity,omitempty" yaml:"maxQuantity,omitempty"`
	// MultiSKU is the share of orders with two to three SKUs.
	MultiSKU float64 `json:"multiSKU,omitempty" yaml:"multiSKU,omitempty"`
	// Retry is the share of orders sent with an Idempotency-Key and sent again;
	// AbandonFirst is the share of those whose first attempt is abandoned before
	// its answer (a client that lost the response).
	Retry        float64 `json:"retry,omitempty" yaml:"retry,omitempty"`
	AbandonFirst float64 `json:"abandonFirst,omitempty" yaml:"abandonFirst,omitempty"`
	// Cancel is the share of placed orders cancelled right after.
	Cancel float64 `json:"cancel,omitempty" yaml:"cancel,omitempty"`
	// Prefix names the SKUs (<prefix>-<n>); a random one by default, so runs do
	// not share stock.
	Prefix string `json:"prefix,omitempty" yaml:"prefix,omitempty"`
	// Locations is how many locations the SKUs' stock is spread over: 1 (the
	// default) keeps it all in the default location, as a deployment that
	// never made a location; N > 1 is the default location and N-1 made at
	// setup (loadtest-2 ... loadtest-N, priorities 10, 20, ...), each SKU's
	// stock spread over them (see spread).
	Locations int `json:"locations,omitempty" yaml:"locations,omitempty"`
	// Named and Unsplit are the shares of order lines that name a location
	// (one of the run's, at random) and that say "split": false; the rest
	// are allocated by the service, split over locations as needed.
	Named   float64 `json:"named,omitempty" yaml:"named,omitempty"`
	Unsplit float64 `json:"unsplit,omitempty" yaml:"unsplit,omitempty"`
	// Checkout, when set, makes each iteration a checkout (a hold, a think time,
	// then a confirm, a release or nothing) instead of an order. Retry and
	// AbandonFirst apply to each of its POSTs.
	Checkout *Checkout `json:"checkout,omitempty" yaml:"checkout,omitempty"`
}

// Checkout is the checkout workload: hold, think, then confirm (a share),
// release (a share) or abandon the hold to expire (the rest).
type Checkout struct {
	// HoldTTL is every hold's ttl, 1s..24h as the service accepts. Default 10s.
	HoldTTL Duration `json:"holdTTL,omitempty" yaml:"holdTTL,omitempty"`
	// ThinkTime is the mean time between a hold and its end; each is uniform in
	// 0.5x..1.5x of it, so that holds do not end in lockstep.
	ThinkTime Duration `json:"thinkTime,omitempty" yaml:"thinkTime,omitempty"`
	// Confirm and Release are the shares of holds confirmed and released.
	Confirm float64 `json:"confirm,omitempty" yaml:"confirm,omitempty"`
	Release float64 `json:"release,omitempty" yaml:"release,omitempty"`
	// PartialConfirm is the share of confirms that confirm fewer units than held.
	PartialConfirm float64 `json:"partialConfirm,omitempty" yaml:"partialConfirm,omitempty"`
	// ExpiryMargin is how long past a hold's expiry the audit waits before it
	// reads: at least the service's sweep interval plus one lock lease (6s with
	// its defaults). Default 10s, 100ms..10m.
	ExpiryMargin Duration `json:"expiryMargin,omitempty" yaml:"expiryMargin,omitempty"`
}

// Bounds of the checkout settings.
const (
	minHoldTTL      = time.Second
	maxHoldTTL      = 24 * time.Hour
	defaultHoldTTL  = 10 * time.Second
	minExpiryMargin = 100 * time.Millisecond
	maxExpiryMargin = 10 * time.Minute
	defaultMargin   = 10 * time.Second
)

func (co *Checkout) validate() error {
	if co.HoldTTL == 0 {
		co.HoldTTL = Duration(defaultHoldTTL)
	}
	if co.ExpiryMargin == 0 {
		co.ExpiryMargin = Duration(defaultMargin)
	}
	var errs []error
	if d := time.Duration(co.HoldTTL); d < minHoldTTL || d > maxHoldTTL {
		errs = append(errs, fmt.Errorf("checkout: holdTTL %s is not in %s..%s", d, minHoldTTL, maxHoldTTL))
	}
	if d := time.Duration(co.ExpiryMargin); d < minExpiryMargin || d > maxExpiryMargin {
		errs = append(errs, fmt.Errorf("checkout: expiryMargin %s is not in %s..%s", d, minExpiryMargin, maxExpiryMargin))
	}
	if co.ThinkTime < 0 || time.Duration(co.ThinkTime) > maxHoldTTL {
		errs = append(errs, fmt.Errorf("checkout: thinkTime is in 0..%s", maxHoldTTL))
	}
	for _, share := range []float64{co.Confirm, co.Release, co.PartialConfirm} {
		if share < 0 || share > 1 {
			errs = append(errs, errors.New("checkout: shares (confirm, release, partialConfirm) are between 0 and 1"))
			break
		}
	}
	if co.Confirm+co.Release > 1+1e-9 {
		errs = append(errs, fmt.Errorf("checkout: confirm %v + release %v is over 1 (the rest are abandoned)", co.Confirm, co.Release))
	}
	return errors.Join(errs...)
}

// Config is a whole run.
type Config struct {
	BaseURL    string `json:"baseURL" yaml:"baseURL"`
	AdminToken string `json:"adminToken,omitempty" yaml:"adminToken,omitempty"`
	// APIKey is a client's key, for the workload's requests (the admin
	// token's when empty).
	APIKey     string              `json:"apiKey,omitempty" yaml:"apiKey,omitempty"`
	Scenarios  map[string]Scenario `json:"scenarios" yaml:"scenarios"`
	Thresholds map[string][]string `json:"thresholds,omitempty" yaml:"thresholds,omitempty"`
	// Ceiling, a path such as /healthz, turns every scenario into GETs of it in
	// the same loops: no seeding, no orders, no audit. Its rate is the ceiling
	// an order rate is a share of.
	Ceiling string `json:"ceiling,omitempty" yaml:"ceiling,omitempty"`
	// AuditEvents makes the audit read the service's feed of stock events
	// (GET /v1/events) and check that they tell every run SKU's counters.
	AuditEvents bool `json:"auditEvents,omitempty" yaml:"auditEvents,omitempty"`
	// Timeout bounds each request. Default 10s.
	Timeout Duration `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	// Log takes the run's few messages (the teardown's wait, a failed audit);
	// none when nil.
	Log *slog.Logger `json:"-" yaml:"-"`
}

// LoadConfig reads a scenario file, YAML or JSON by its extension.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	var c Config
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		err = dec.Decode(&c)
	case ".yaml", ".yml":
		err = yaml.UnmarshalWithOptions(b, &c, yaml.Strict(), yaml.UseJSONUnmarshaler())
	default:
		return Config{}, fmt.Errorf("%s: want a .yaml, .yml or .json file", path)
	}
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate fills defaults and rejects what cannot run.
func (c *Config) Validate() error {
	var errs []error
	if c.BaseURL == "" {
		errs = append(errs, errors.New("baseURL is required"))
	}
	if len(c.Scenarios) == 0 {
		errs = append(errs, errors.New("at least one scenario is required"))
	}
	if c.Timeout == 0 {
		c.Timeout = Duration(10 * time.Second)
	}
	if c.Ceiling != "" && (!strings.HasPrefix(c.Ceiling, "/") || strings.ContainsAny(c.Ceiling, " \t\r\n#")) {
		errs = append(errs, fmt.Errorf("ceiling %q: want a path such as /healthz", c.Ceiling))
	}
	for name, s := range c.Scenarios {
		if err := s.validate(); err != nil {
			errs = append(errs, fmt.Errorf("scenario %s: %w", name, err))
		}
		c.Scenarios[name] = s
	}
	for metric, exprs := range c.Thresholds {
		for _, e := range exprs {
			if _, err := ParseThreshold(metric, e); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (s *Scenario) validate() error {
	if s.TimeUnit == 0 {
		s.TimeUnit = Duration(time.Second)
	}
	w := &s.Workload
	if w.SKUs == 0 {
		w.SKUs = 1
	}
	if w.MaxQuantity == 0 {
		w.MaxQuantity = 1
	}
	if w.Popularity == "" {
		w.Popularity = "uniform"
	}
	if w.Locations == 0 {
		w.Locations = 1
	}
	var errs []error
	switch s.Executor {
	case ConstantVUs:
		if s.VUs < 1 || s.Duration <= 0 {
			errs = append(errs, errors.New("constant-vus needs vus >= 1 and a duration"))
		}
	case RampingVUs:
		if len(s.Stages) == 0 {
			errs = append(errs, errors.New("ramping-vus needs stages"))
		}
	case ConstantArrivalRate:
		if s.Rate < 1 || s.Duration <= 0 {
			errs = append(errs, errors.New("constant-arrival-rate needs rate >= 1 and a duration"))
		}
	case RampingArrivalRate:
		if len(s.Stages) == 0 {
			errs = append(errs, errors.New("ramping-arrival-rate needs stages"))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown executor %q (want %s, %s, %s or %s)", s.Executor,
			ConstantVUs, RampingVUs, ConstantArrivalRate, RampingArrivalRate))
	}
	if s.Executor == ConstantArrivalRate || s.Executor == RampingArrivalRate {
		if s.PreAllocatedVUs < 1 {
			errs = append(errs, errors.New("arrival-rate executors need preAllocatedVUs >= 1"))
		}
		if s.MaxVUs < s.PreAllocatedVUs {
			s.MaxVUs = s.PreAllocatedVUs
		}
	}
	if w.Popularity != "uniform" && w.Popularity != "zipf" {
		errs = append(errs, fmt.Errorf("popularity %q (want uniform or zipf)", w.Popularity))
	}
	for _, share := range []float64{w.MultiSKU, w.Retry, w.AbandonFirst, w.Cancel} {
		if share < 0 || share > 1 {
			errs = append(errs, errors.New("shares (multiSKU, retry, abandonFirst, cancel) are between 0 and 1"))
			break
		}
	}
	neg := s.VUs < 0 || s.StartVUs < 0 || s.Rate < 0 || s.StartRate < 0 || s.PreAllocatedVUs < 0 || s.MaxVUs < 0 ||
		s.Duration < 0 || s.StartTime < 0 || s.TimeUnit < 0
	for _, st := range s.Stages {
		neg = neg || st.Target < 0 || st.Duration < 0
	}
	if neg {
		errs = append(errs, errors.New("counts, rates and durations cannot be negative"))
	}
	if w.Prefix != "" && !prefixRe.MatchString(w.Prefix) {
		errs = append(errs, fmt.Errorf("prefix %q: 1 to 40 of A-Z a-z 0-9 . _ -", w.Prefix))
	}
	if w.Stock < 0 || w.SKUs < 1 || w.MaxQuantity < 1 || w.MaxQuantity > 1000 {
		errs = append(errs, errors.New("workload: skus >= 1, stock >= 0, maxQuantity in 1..1000"))
	}
	if err := w.validateLocations(); err != nil {
		errs = append(errs, err)
	}
	if w.Checkout != nil {
		if err := w.Checkout.validate(); err != nil {
			errs = append(errs, err)
		}
		if w.Cancel != 0 {
			// A confirmed hold's order stays placed, so that sold is what holds confirmed.
			errs = append(errs, errors.New("checkout: cancel applies to orders; a checkout cancels nothing"))
		}
	}
	return errors.Join(errs...)
}

// maxLocations bounds a run's locations: a few, as a shop has.
const maxLocations = 16

func (w *Workload) validateLocations() error {
	var errs []error
	if w.Locations < 1 || w.Locations > maxLocations {
		errs = append(errs, fmt.Errorf("locations %d: want 1..%d", w.Locations, maxLocations))
	}
	if w.Named < 0 || w.Named > 1 || w.Unsplit < 0 || w.Unsplit > 1 {
		errs = append(errs, errors.New("shares (named, unsplit) are between 0 and 1"))
	} else if w.Named+w.Unsplit > 1+1e-9 {
		errs = append(errs, fmt.Errorf("named %v + unsplit %v is over 1 (the rest are allocated)", w.Named, w.Unsplit))
	}
	if w.Checkout != nil && (w.Named > 0 || w.Unsplit > 0) {
		// A hold's lines are merged per SKU and confirmed as held: they are
		// the service's to allocate.
		errs = append(errs, errors.New("checkout: named and unsplit apply to orders; a checkout's holds are allocated"))
	}
	return errors.Join(errs...)
}

// total is how long the scenario runs, start time included.
func (s Scenario) total() time.Duration {
	d := time.Duration(s.StartTime)
	switch s.Executor {
	case ConstantVUs, ConstantArrivalRate:
		return d + time.Duration(s.Duration)
	}
	for _, st := range s.Stages {
		d += time.Duration(st.Duration)
	}
	return d
}
