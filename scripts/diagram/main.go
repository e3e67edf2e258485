// Command diagram renders the architecture picture of the README,
// docs/architecture.svg, from its text source, docs/architecture.txt (whose
// comments describe the format). `make diagram` runs it; a test fails when the
// committed picture is not what the source renders to.
//
// It needs nothing but Go: the layout is a grid, the text widths are
// estimated, and the output is the same bytes for the same source.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
)

func main() {
	in := flag.String("in", "docs/architecture.txt", "the source")
	out := flag.String("out", "docs/architecture.svg", "the SVG written")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "diagram:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	src, err := os.Open(in)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	var svg bytes.Buffer
	if err := build(src, &svg); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return os.WriteFile(out, svg.Bytes(), 0o644)
}
