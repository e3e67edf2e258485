package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed picture is what its source renders to: a change to either
// alone fails here.
func TestCommittedSVGIsRendered(t *testing.T) {
	src, err := os.Open("../../docs/architecture.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = src.Close() }()
	var got bytes.Buffer
	if err := build(src, &got); err != nil {
		t.Fatalf("docs/architecture.txt does not render: %v", err)
	}
	want, err := os.ReadFile("../../docs/architecture.svg")
	if err != nil {
		t.Fatalf("%v: run make diagram", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		gl, wl := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
			i++
		}
		at := func(l []string) string {
			if i < len(l) {
				return l[i]
			}
			return "(end of file)"
		}
		t.Fatalf("docs/architecture.svg is not what docs/architecture.txt renders to: run make diagram\n"+
			"line %d committed: %s\nline %d rendered:  %s", i+1, at(wl), i+1, at(gl))
	}
}

// The same source gives the same bytes, and run writes them where -out says.
func TestRenderIsDeterministic(t *testing.T) {
	out := filepath.Join(t.TempDir(), "a.svg")
	if err := run("../../docs/architecture.txt", out); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		var again bytes.Buffer
		src, err := os.ReadFile("../../docs/architecture.txt")
		if err != nil {
			t.Fatal(err)
		}
		if err := build(bytes.NewReader(src), &again); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, again.Bytes()) {
			t.Fatal("two renderings of the same source differ")
		}
	}
}

const canvas = `canvas width=600 columns=3 "t"` + "\n"

// Every error names the line at fault and what is wrong with it.
func TestErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"no closing quote", canvas + `box a row=0 col=0 "a`, `line 2: a string with no closing quote`},
		{"unknown statement", canvas + "\n# a comment\nbox a row=0 col=0 \"a\"\nline a b", `line 5: unknown statement "line"`},
		{"arrow to an unknown box", canvas + "box a row=0 col=0 \"a\"\nbox b row=1 col=0 \"b\"\narrow a -> c \"x\"", `line 4: arrow a -> c: no box or group "c"`},
		{"arrow from an unknown box", canvas + "box a row=0 col=0 \"a\"\narrow z -> a", `line 3: arrow z -> a: no box or group "z"`},
		{"arrow without ->", canvas + "box a row=0 col=0 \"a\"\narrow a b", `line 3: arrow takes FROM -> TO`},
		{"id declared twice", canvas + "box a row=0 col=0 \"a\"\nbox a row=1 col=0 \"b\"", `line 3: "a" is already declared on line 2`},
		{"unknown colour", canvas + `box a row=0 col=0 colour=pink "a"`, `line 2: colour=pink: not one of amber, blue, green, grey, orange, purple, red, teal`},
		{"bad column range", canvas + `box a row=0 col=2..1 "a"`, `line 2: col=2..1: not a column`},
		{"off the grid", canvas + `box a row=0 col=1..3 "a"`, `line 2: box "a": col=1..3 is off the grid (columns 0..2)`},
		{"boxes overlap", canvas + "box a row=0 col=0..1 \"a\"\nbox b row=0 col=1 \"b\"", `line 3: box "b" overlaps box "a" (line 2)`},
		{"group of an unknown box", canvas + "box a row=0 col=0 \"a\"\ngroup g \"g\" a b", `line 3: "b" is not a box declared above`},
		{"unknown option", canvas + `box a row=0 col=0 size=2 "a"`, `line 2: unknown option size=`},
		{"bad fraction", canvas + "box a row=0 col=0 \"a\"\nbox b row=1 col=0 \"b\"\narrow a -> b at=2", `line 4: at=2: not a fraction from 0 to 1`},
		{"text too wide", canvas + `box a row=0 col=0 "a" "a line far too long for a box a third of six hundred pixels wide"`, `line 2: box "a": the line "a line far too long`},
		{"no canvas", `box a row=0 col=0 "a"`, `no canvas statement`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := build(strings.NewReader(tc.src), &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Boxes one above the other are joined by a vertical line at the middle of the
// span they share, side by side by a horizontal one, others by an elbow; a
// label is drawn, escaped.
func TestRoutes(t *testing.T) {
	src := canvas + `
box a row=0 col=0..1 "a"
box b row=1 col=1 "b"
box c row=1 col=2 "c"
box d row=2 col=0 "d"
arrow a -> b "x < y"
arrow b -> c dashed
arrow c -> d at=0.5
`
	var out bytes.Buffer
	if err := build(strings.NewReader(src), &out); err != nil {
		t.Fatal(err)
	}
	svg := out.String()
	// Columns of (600-2*20-2*24)/3 = 170.7px: b spans 214.7..385.3, c 409.3..580.
	for _, want := range []string{
		`<path d="M300,60 L300,102" fill="none" stroke="#4b5563" stroke-width="1.5" marker-end="url(#head)"/>`,
		`<path d="M385.3,122 L409.3,122" fill="none" stroke="#4b5563" stroke-width="1.5" stroke-dasharray="5 4" marker-end="url(#head)"/>`,
		`<path d="M494.7,142 L494.7,198 L190.7,198" fill="none"`,
		`>x &lt; y</text>`,
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("the SVG lacks %s:\n%s", want, svg)
		}
	}
}
