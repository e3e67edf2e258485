package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
)

// writeResults writes a section's results, v, as dir/name.json and its chart
// as dir/name.png.
func writeResults(dir, name string, v any, chart func(path string) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644); err != nil {
		return err
	}
	if err := chart(filepath.Join(dir, name+".png")); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}

// replaceSection replaces the section under heading of the report (or adds
// it) by what markdown writes, leaving the rest as it was.
func replaceSection(o options, heading string, markdown func(w io.Writer, out string)) error {
	old, err := os.ReadFile(o.markdown)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	var section bytes.Buffer
	markdown(&section, o.out)
	return os.WriteFile(o.markdown, spliceHeading(old, section.Bytes(), heading), 0o644)
}

// profileName is the profile a section's command ran with.
func profileName(command string) string {
	if strings.Contains(command, "-profile full") || strings.Contains(command, "-profile=full") {
		return "full"
	}
	return "quick"
}

// workloadTitle is a workload's title, or its name when it has none.
func workloadTitle(name string) string {
	for _, w := range workloads {
		if w.Name == name {
			return w.Title
		}
	}
	return name
}

// loadNote reads a section's one-minute load averages against the cores.
func loadNote(cores int, before, after float64) string {
	note := fmt.Sprintf("one-minute load average %.1f before this section and %.1f after", before, after)
	switch {
	case cores > 0 && before > float64(cores):
		note += fmt.Sprintf(", above its %d cores before it started: other work, such as other jobs' tests, ran beside the benchmark", cores)
	case cores > 0 && after > float64(cores):
		note += fmt.Sprintf(": the benchmark's own processes keep it above the %d cores", cores)
	}
	return note
}

// onOff is how an on-against-off section (events, authentication) was run,
// the head of its results: the command, the commit, the strategy, the load,
// and the machine's cores and its one-minute load average before and after
// the section (other work on a shared machine shows there).
type onOff struct {
	Command    string        `json:"command"`
	When       string        `json:"when"`
	Commit     string        `json:"commit"`
	Strategy   string        `json:"strategy"`
	Replicas   int           `json:"replicas"`
	VUs        int           `json:"vus"`
	Repeats    int           `json:"repeats"`
	Duration   time.Duration `json:"duration_ns"`
	Warmup     time.Duration `json:"warmup_ns"`
	Cores      int           `json:"cores"`
	LoadBefore float64       `json:"load_before"`
	LoadAfter  float64       `json:"load_after"`
}

// newOnOff is the head of an on-against-off section measured now on the
// default strategy at vus.
func newOnOff(o options, m Machine, vus int) onOff {
	return onOff{Command: o.command, When: m.When, Commit: m.Commit, Strategy: string(orders.DefaultStrategy), Replicas: o.replicas,
		VUs: vus, Repeats: o.profile.Repeats, Duration: o.profile.Duration, Warmup: lockWarmup, Cores: m.Cores, LoadBefore: loadAverage()}
}
