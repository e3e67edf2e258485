package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestShippedScenarioFilesLoad(t *testing.T) {
	for _, f := range []string{"scenarios/hot-sku.yaml", "scenarios/smoke.json", "scenarios/checkout.yaml", "scenarios/locations.yaml"} {
		c, err := LoadConfig(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	c, _ := LoadConfig("scenarios/checkout.yaml")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if co := c.Scenarios["hot"].Workload.Checkout; co == nil || time.Duration(co.HoldTTL) != 15*time.Second || co.Confirm != 0.6 ||
		time.Duration(c.Scenarios["spread"].Workload.Checkout.ExpiryMargin) != defaultMargin {
		t.Fatalf("checkout scenario read as %+v", co)
	}
	c, _ = LoadConfig("scenarios/hot-sku.yaml")
	if s := c.Scenarios["spread"]; s.Executor != RampingArrivalRate || len(s.Stages) != 2 || time.Duration(s.Stages[0].Duration) != 10*time.Second || s.Workload.Popularity != "zipf" {
		t.Fatalf("spread scenario read as %+v", s)
	}
}

func TestBadScenarioFilesAreRefused(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown-field.yaml": "baseURL: x\nscenarios:\n  a:\n    executor: constant-vus\n    vus: 1\n    duration: 1s\n    turbo: true\n",
		"bad-executor.json":  `{"baseURL":"x","scenarios":{"a":{"executor":"shared-iterations"}}}`,
		"bad-threshold.json": `{"baseURL":"x","scenarios":{"a":{"executor":"constant-vus","vus":1,"duration":"1s"}},"thresholds":{"http_req_duration":["p95<1"]}}`,
		"bad-duration.yaml":  "baseURL: x\nscenarios:\n  a:\n    executor: constant-vus\n    vus: 1\n    duration: soon\n",
		"no-scenarios.json":  `{"baseURL":"x"}`,
		"bad-share.json":     `{"baseURL":"x","scenarios":{"a":{"executor":"constant-vus","vus":1,"duration":"1s","workload":{"retry":2}}}}`,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(p)
		if err == nil {
			err = c.Validate()
		}
		if err == nil {
			t.Errorf("%s was accepted", name)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "x.toml"), []byte("a=1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(filepath.Join(dir, "x.toml")); err == nil {
		t.Error("a .toml file was accepted")
	}
}
