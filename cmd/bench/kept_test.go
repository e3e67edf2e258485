package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run that rewrites the report keeps the sections written by hand.
func TestReportKeepsHandWrittenSections(t *testing.T) {
	r := synthetic()
	dir := t.TempDir()
	o := options{out: filepath.Join(dir, "out"), markdown: filepath.Join(dir, "BENCHMARKS.md"), workloads: workloads[:1]}
	section := "## Allocations per order\n\nBy hand: 33 allocs/op.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
	old := "# Benchmarks\n\nold figures\n\n" + section + "\n## The strategies\n\nold text\n"
	if err := os.WriteFile(o.markdown, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 { // twice: the section is not doubled
		if err := r.write(o); err != nil {
			t.Fatal(err)
		}
	}
	md, err := os.ReadFile(o.markdown)
	if err != nil {
		t.Fatal(err)
	}
	s := string(md)
	if strings.Count(s, section) != 1 || strings.Contains(s, "old figures") {
		t.Fatalf("the section is not kept once in the new report:\n%s", s)
	}
	if strings.Index(s, section) > strings.Index(s, "\n## The strategies\n") {
		t.Error("the kept section is not before The strategies")
	}
	if !strings.Contains(s, "\n"+section+"\n## ") {
		t.Error("the kept section is not followed by the next one after a blank line")
	}
}

// Without a report, or without the sections, nothing is kept.
func TestKeptSectionsNone(t *testing.T) {
	dir := t.TempDir()
	if kept, err := keptSections(filepath.Join(dir, "none.md")); err != nil || kept != nil {
		t.Fatalf("%q %v", kept, err)
	}
	p := filepath.Join(dir, "BENCHMARKS.md")
	if err := os.WriteFile(p, []byte("# Benchmarks\n\n## Setup\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if kept, err := keptSections(p); err != nil || kept != nil {
		t.Fatalf("%q %v", kept, err)
	}
}
