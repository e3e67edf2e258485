package main

import "testing"

// The section leads the report: replaced in place, or put before the first
// section of a report that has none.
func TestSpliceLead(t *testing.T) {
	section := issueHeading + "\n\nnew\n"
	for _, tc := range []struct{ name, report, want string }{
		{"replaced", "# B\n\nx\n\n" + issueHeading + "\n\nold\n\n## Setup\n\ny\n", "# B\n\nx\n\n" + issueHeading + "\n\nnew\n\n## Setup\n\ny\n"},
		{"added first", "# B\n\nx\n\n## Setup\n\ny\n\n## Holds\n\nz\n", "# B\n\nx\n\n" + issueHeading + "\n\nnew\n\n## Setup\n\ny\n\n## Holds\n\nz\n"},
		{"no report", "", issueHeading + "\n\nnew\n"},
	} {
		if got := string(spliceLead([]byte(tc.report), []byte(section), issueHeading)); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
