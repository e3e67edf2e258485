package cluster_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The version the test expects of the API server is the one scripts/kube
// builds, and the one docs/operations.md says the manifests are tested on.
func TestTestedVersionIsNamed(t *testing.T) {
	mod, err := os.ReadFile("../../../scripts/kube/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s\.io/kubernetes (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("scripts/kube/go.mod requires no k8s.io/kubernetes")
	}
	if built := string(m[1]); built != kubeVersion {
		t.Errorf("scripts/kube builds Kubernetes %s; the test expects %s", built, kubeVersion)
	}
	// Every staging module is replaced with the release of the same minor.
	staging := strings.TrimPrefix(kubeVersion, "v1.")
	replaces := regexp.MustCompile(`(?m)^\s*(k8s\.io/\S+) => (\S+) (v\S+)$`).FindAllStringSubmatch(string(mod), -1)
	if len(replaces) == 0 {
		t.Error("scripts/kube/go.mod replaces no staging module")
	}
	for _, r := range replaces {
		if r[1] != r[2] || r[3] != "v0."+staging {
			t.Errorf("scripts/kube/go.mod: %s => %s %s, want the module itself at v0.%s", r[1], r[2], r[3], staging)
		}
	}
	doc, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "Tested on Kubernetes " + kubeVersion; !strings.Contains(string(doc), want) {
		t.Errorf("docs/operations.md does not say %q", want)
	}
	for _, v := range regexp.MustCompile(`Kubernetes \*{0,2}(v1\.\d+\.\d+)`).FindAllStringSubmatch(string(doc), -1) {
		if v[1] != kubeVersion {
			t.Errorf("docs/operations.md names Kubernetes %s; the manifests are tested on %s", v[1], kubeVersion)
		}
	}
}
