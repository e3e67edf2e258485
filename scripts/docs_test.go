package scripts

// The README and the pages of docs/ are checked as a reader follows them:
// every relative link leads to a file, every #anchor to a heading, and every
// make target shown as a command is one the Makefile has.

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	mdHeading  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	inlineCode = regexp.MustCompile("`([^`]+)`")
	makeCall   = regexp.MustCompile(`(?:^|[\s;&|(])make\s+([A-Za-z0-9_.-]+)`)
	makeTarget = regexp.MustCompile(`(?m)^([A-Za-z0-9][A-Za-z0-9_.-]*)\s*:([^=]|$)`)
	// What GitHub keeps of a heading in its anchor: letters, digits, spaces,
	// hyphens and underscores.
	slugDrop = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// docPages is the README and every page of docs/, relative to the repository.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md"}, pages...)
}

// mdDoc is a Markdown file split into its prose (fenced blocks blanked, so that
// line numbers hold) and the lines of its fenced code blocks.
type mdDoc struct {
	prose []string
	code  []string // "<line>\x00<text>"
}

func readMD(t *testing.T, path string) mdDoc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d mdDoc
	fence := ""
	for i, l := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			d.prose = append(d.prose, "")
		case fence != "" && strings.HasPrefix(trimmed, fence):
			fence = ""
			d.prose = append(d.prose, "")
		case fence != "":
			d.code = append(d.code, strconv.Itoa(i+1)+"\x00"+l)
			d.prose = append(d.prose, "")
		default:
			d.prose = append(d.prose, l)
		}
	}
	return d
}

// slug is GitHub's anchor for a heading: its text (links reduced to their
// text, code marks dropped), lower case, punctuation removed, spaces as hyphens.
func slug(heading string) string {
	s := linkText.ReplaceAllString(heading, "$1")
	s = strings.ToLower(s)
	s = slugDrop.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

// anchors lists a Markdown file's heading anchors, repeated headings numbered
// -1, -2 as GitHub numbers them.
func anchors(t *testing.T, path string) []string {
	t.Helper()
	seen := map[string]int{}
	var out []string
	for _, l := range readMD(t, path).prose {
		m := mdHeading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			out = append(out, s+"-"+strconv.Itoa(n))
		} else {
			out = append(out, s)
		}
		seen[s]++
	}
	return out
}

// Every relative link of the README and of docs/ leads to a file or folder of
// the repository, and every #anchor, on the same page or another, to one of
// the target's headings.
func TestDocLinks(t *testing.T) {
	cache := map[string][]string{}
	anchorsOf := func(path string) []string {
		if _, ok := cache[path]; !ok {
			cache[path] = anchors(t, path)
		}
		return cache[path]
	}
	links := 0
	for _, page := range docPages(t) {
		for i, l := range readMD(t, page).prose {
			for _, m := range mdLink.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				file, anchor, _ := strings.Cut(target, "#")
				where := page
				if file != "" {
					where = filepath.Join(filepath.Dir(page), file)
					if _, err := os.Stat(where); err != nil {
						t.Errorf("%s:%d: link to %s: no such file", page, i+1, target)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(where, ".md") {
					t.Errorf("%s:%d: link to %s: an anchor in a file that is not Markdown", page, i+1, target)
					continue
				}
				if !slices.Contains(anchorsOf(where), anchor) {
					t.Errorf("%s:%d: link to %s: %s has no heading #%s (it has %v)", page, i+1, target, where, anchor, anchorsOf(where))
				}
			}
		}
	}
	if links == 0 {
		t.Fatal("no relative link found in the README and docs/: the parser is broken")
	}
}

// Every `make <target>` the README and docs/ show, in a code block or in inline
// code, is a target of the Makefile.
func TestDocMakeTargets(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, m := range makeTarget.FindAllStringSubmatch(string(mk), -1) {
		targets = append(targets, m[1])
	}
	shown := 0
	check := func(page, where, code string) {
		for _, m := range makeCall.FindAllStringSubmatch(code, -1) {
			if strings.HasPrefix(m[1], "-") || strings.Contains(m[1], "=") {
				continue // an option or a variable, not a target
			}
			shown++
			if !slices.Contains(targets, m[1]) {
				t.Errorf("%s:%s: `make %s`: the Makefile has no target %s (it has %v)", page, where, m[1], m[1], targets)
			}
		}
	}
	for _, page := range docPages(t) {
		d := readMD(t, page)
		for _, c := range d.code {
			line, text, _ := strings.Cut(c, "\x00")
			check(page, line, text)
		}
		// Inline code may run across a line break: look at whole paragraphs.
		prose := strings.Join(d.prose, "\n")
		for _, para := range strings.Split(prose, "\n\n") {
			for _, m := range inlineCode.FindAllStringSubmatch(para, -1) {
				check(page, "inline `"+m[1]+"`", strings.ReplaceAll(m[1], "\n", " "))
			}
		}
	}
	if shown == 0 {
		t.Fatal("no make command found in the README and docs/: the parser is broken")
	}
}

// goFile is an inline code span naming a Go or Lua file of the repository.
var goFile = regexp.MustCompile(`^[A-Za-z0-9_./-]+\.(go|lua)$`)

// TestDocSourceFilesExist: a Go or Lua file the pages name by its path exists,
// and in the README's order path a file named alone (`slots.go`) is in the
// folder of a file its step names by path, so that a move or a rename the pages
// missed fails here, not in a reader's hands.
func TestDocSourceFilesExist(t *testing.T) {
	for _, page := range docPages(t) {
		inPath := false
		for i, line := range readMD(t, page).prose {
			if h := mdHeading.FindStringSubmatch(line); h != nil {
				inPath = page == "../README.md" && h[2] == "The order path"
			}
			var dirs, alone []string
			for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
				name := m[1]
				if !goFile.MatchString(name) {
					continue
				}
				if !strings.Contains(name, "/") {
					alone = append(alone, name)
					continue
				}
				dirs = append(dirs, filepath.Dir(name))
				if _, err := os.Stat(filepath.Join("..", name)); err != nil {
					t.Errorf("%s:%d: `%s` names no file of the repository", page, i+1, name)
				}
			}
			if !inPath {
				continue
			}
			for _, name := range alone {
				if !slices.ContainsFunc(dirs, func(d string) bool {
					_, err := os.Stat(filepath.Join("..", d, name))
					return err == nil
				}) {
					t.Errorf("%s:%d: `%s` is in none of the folders its step names (%v)", page, i+1, name, dirs)
				}
			}
		}
	}
}
