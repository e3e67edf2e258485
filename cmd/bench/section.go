package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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

// readJSON reads path's JSON into v.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// spliceLead replaces the section of report under heading by section, or puts
// it before the report's first section.
func spliceLead(report, section []byte, heading string) []byte {
	s := string(report)
	if strings.Contains(s, "\n"+heading+"\n") || strings.HasPrefix(s, heading+"\n") {
		if strings.HasPrefix(s, heading+"\n") {
			s = "\n" + s
			return []byte(strings.TrimPrefix(string(spliceHeading([]byte(s), section, heading)), "\n"))
		}
		return spliceHeading(report, section, heading)
	}
	if i := strings.Index(s, "\n## "); i >= 0 {
		return []byte(s[:i+1] + string(section) + "\n" + s[i+1:])
	}
	return spliceHeading(report, section, heading)
}

// spliceHeading replaces the section of report under heading (up to the next
// heading of its level) by section, or puts it before "## The strategies", or
// at the end.
func spliceHeading(report, section []byte, heading string) []byte {
	s := string(report)
	if i := strings.Index(s, "\n"+heading+"\n"); i >= 0 {
		rest := s[i+1+len(heading):]
		j := strings.Index(rest, "\n## ")
		if j < 0 {
			return []byte(s[:i+1] + string(section))
		}
		return []byte(s[:i+1] + string(section) + "\n" + rest[j+1:])
	}
	if i := strings.Index(s, "\n## The strategies\n"); i >= 0 {
		return []byte(s[:i+1] + string(section) + "\n" + s[i+1:])
	}
	if s != "" && !strings.HasSuffix(s, "\n\n") {
		s += "\n"
	}
	return []byte(s + string(section))
}
