package main

import "testing"

// The Holds section replaces its former self, or goes before the strategies,
// and leaves the rest of the report as it was.
func TestSpliceSection(t *testing.T) {
	section := "## Holds\n\nnew\n"
	for _, tc := range []struct{ name, report, want string }{
		{"replaced", "# B\n\n## Cost\n\nx\n\n## Holds\n\nold\nold\n\n## The strategies\n\ny\n",
			"# B\n\n## Cost\n\nx\n\n## Holds\n\nnew\n\n## The strategies\n\ny\n"},
		{"replaced at the end", "# B\n\n## Holds\n\nold\n", "# B\n\n## Holds\n\nnew\n"},
		{"added before the strategies", "# B\n\n## Cost\n\nx\n\n## The strategies\n\ny\n",
			"# B\n\n## Cost\n\nx\n\n## Holds\n\nnew\n\n## The strategies\n\ny\n"},
		{"appended", "# B\n\nx\n", "# B\n\nx\n\n## Holds\n\nnew\n"},
		{"no report", "", "## Holds\n\nnew\n"},
	} {
		if got := string(spliceSection([]byte(tc.report), []byte(section))); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
