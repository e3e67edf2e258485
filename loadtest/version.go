package main

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// versionLine is what -version prints: the main module's version, the commit
// the binary was built from when the build recorded it (vcs.revision,
// vcs.time, vcs.modified), and the Go version. bi may be nil (no build info).
func versionLine(bi *debug.BuildInfo) string {
	if bi == nil {
		return "loadtest (unknown version) " + runtime.Version()
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	parts := []string{"loadtest " + v}
	for _, st := range bi.Settings {
		switch st.Key {
		case "vcs.revision":
			parts = append(parts, "revision "+st.Value)
		case "vcs.time":
			parts = append(parts, "committed "+st.Value)
		case "vcs.modified":
			if st.Value == "true" {
				parts = append(parts, "modified")
			}
		}
	}
	return strings.Join(parts, ", ") + ", built with " + bi.GoVersion
}
