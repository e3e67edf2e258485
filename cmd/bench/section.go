package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
