package main

import (
	"errors"
	"os"
	"strings"
)

// keptHeadings are the sections of the report that no run of cmd/bench
// measures (a Go benchmark's figures, written by hand): a run that rewrites
// the report keeps them as they were.
var keptHeadings = []string{"## Allocations per order", "## Issue 40: targets", "## Issue 41: targets"}

// keptSections reads the kept sections of the report at path, each from its
// heading to the next of its level; none when there is no report yet.
func keptSections(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s := "\n" + string(b)
	var kept []string
	for _, h := range keptHeadings {
		i := strings.Index(s, "\n"+h+"\n")
		if i < 0 {
			continue
		}
		section := s[i+1:]
		if j := strings.Index(section[len(h):], "\n## "); j >= 0 {
			section = section[:len(h)+j+1]
		}
		kept = append(kept, strings.TrimRight(section, "\n")+"\n")
	}
	return kept, nil
}

// restoreSections puts the kept sections back into the report at path, each
// where it was if the report has its heading, else before "## The strategies".
func restoreSections(path string, kept []string) error {
	if len(kept) == 0 {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, section := range kept {
		heading, _, _ := strings.Cut(section, "\n")
		b = spliceHeading(b, []byte(section), heading)
	}
	return os.WriteFile(path, b, 0o644)
}
