package httpapi

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var (
	docStatus      = regexp.MustCompile(`^\*\*(\d{3})\b`)
	balancerReturn = regexp.MustCompile(`"type":"` + regexp.QuoteMeta(ProblemBase) + `([a-z-]+)"[^}]*"status":(\d{3})`)
)

// documentedStatuses maps each "## <slug>" section of docs/problems.md to the
// status its first bold figure gives ("**409.**"); -1 when it gives none.
func documentedStatuses(t *testing.T) map[string]int {
	t.Helper()
	doc, err := os.ReadFile("../../docs/problems.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	slug := ""
	for line := range strings.SplitSeq(string(doc), "\n") {
		if s, ok := strings.CutPrefix(line, "## "); ok {
			slug = strings.TrimSpace(s)
			out[slug] = -1
			continue
		}
		if m := docStatus.FindStringSubmatch(line); m != nil && slug != "" && out[slug] == -1 {
			out[slug], _ = strconv.Atoi(m[1])
		}
	}
	return out
}

// balancerProblems maps each problem type deploy/nginx.conf answers itself to
// its status.
func balancerProblems(t *testing.T) map[string]int {
	t.Helper()
	conf, err := os.ReadFile("../../deploy/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range balancerReturn.FindAllStringSubmatch(string(conf), -1) {
		out[m[1]], _ = strconv.Atoi(m[2])
	}
	if len(out) == 0 {
		t.Fatal("deploy/nginx.conf answers no problem: the pattern no longer matches its return lines")
	}
	return out
}

// docs/problems.md is the problem types that can be answered, each with its
// status: those of the status table (problem.go) and those the balancer
// answers itself (deploy/nginx.conf), and no other.
func TestProblemsDocIsTheStatusTable(t *testing.T) {
	documented := documentedStatuses(t)
	produced := map[string]int{}
	source := map[string]string{}
	for _, st := range statuses {
		produced[st.slug], source[st.slug] = st.status, "internal/httpapi/problem.go"
	}
	for slug, status := range balancerProblems(t) {
		if have, ok := produced[slug]; ok && have != status {
			t.Errorf("problem %s: %d in problem.go, %d in deploy/nginx.conf", slug, have, status)
			continue
		}
		produced[slug], source[slug] = status, "deploy/nginx.conf"
	}
	for slug, status := range produced {
		doc, ok := documented[slug]
		switch {
		case !ok:
			t.Errorf("problem %s (%d, from %s) has no section \"## %s\" in docs/problems.md", slug, status, source[slug], slug)
		case doc != status:
			t.Errorf("problem %s: docs/problems.md says **%s**, %s answers %d", slug, statusText(doc), source[slug], status)
		}
	}
	for slug := range documented {
		if _, ok := produced[slug]; !ok {
			t.Errorf("docs/problems.md documents %s, which neither problem.go's status table nor deploy/nginx.conf answers", slug)
		}
	}
}

func statusText(s int) string {
	if s < 0 {
		return "no status"
	}
	return fmt.Sprint(s)
}
