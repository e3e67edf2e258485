// Package prometheus holds the tests of the Prometheus configuration and alert
// rules in this directory: promtool checks them and runs their unit tests
// (Debian's prometheus package has promtool).
package prometheus

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/stockguard/stockguard/internal/testenv"
)

// promtool returns the path of promtool; CI (STOCKGUARD_TEST_REQUIRE_REAL=1)
// fails without it instead of skipping.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if testenv.RequireReal() {
			t.Fatal("STOCKGUARD_TEST_REQUIRE_REAL=1 but promtool is not installed (Debian: apt-get install prometheus)")
		}
		t.Skip("promtool is not installed (Debian: apt-get install prometheus)")
	}
	return p
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
	t.Logf("promtool %v:\n%s", args, out)
}

func TestPromtoolCheckConfig(t *testing.T) { runPromtool(t, "check", "config", "prometheus.yml") }

func TestPromtoolCheckRules(t *testing.T) { runPromtool(t, "check", "rules", "rules.yml") }

func TestPromtoolTestRules(t *testing.T) { runPromtool(t, "test", "rules", "rules_test.yml") }

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert string `yaml:"alert"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// Every alert has a unit test where it fires and one where it does not: a rule
// that can never fire, or always does, passes promtool's checks.
func TestEveryAlertTestedBothWays(t *testing.T) {
	var rules ruleFile
	var tests ruleTests
	decode(t, "rules.yml", &rules)
	decode(t, "rules_test.yml", &tests)
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !fires[r.Alert] {
				t.Errorf("%s: no test where it fires", r.Alert)
			}
			if !silent[r.Alert] {
				t.Errorf("%s: no test where it does not fire", r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatal("rules.yml has no alerts")
	}
}

func decode(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
