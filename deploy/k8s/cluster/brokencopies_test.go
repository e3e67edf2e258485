package cluster_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// brokenCopy is a copy of deploy/k8s with one mistake, in the manifest of
// kind, that the API server must refuse (an apply error matching refused) or
// the checks must catch (a problem, or a warning of the API server, matching
// caught).
type brokenCopy struct {
	name    string
	kind    string
	breakIt func(t *testing.T, obj map[string]any)
	refused string
	caught  string
}

var brokenCopies = []brokenCopy{
	{
		name: "misspelt field", kind: "Deployment",
		breakIt: func(t *testing.T, obj map[string]any) { rename(t, obj, "replicas", "replica", "spec") },
		refused: `\.spec\.replica: field not declared in schema`,
	},
	{
		name: "misspelt field of a container", kind: "Deployment",
		breakIt: func(t *testing.T, obj map[string]any) {
			rename(t, container(t, obj), "readinessProbe", "readinesProbe")
		},
		refused: `readinesProbe: field not declared in schema`,
	},
	{
		name: "negative replicas", kind: "Deployment",
		breakIt: func(t *testing.T, obj map[string]any) { set(t, obj, int64(-1), "spec", "replicas") },
		refused: `spec\.replicas: Invalid value: -1`,
	},
	{
		name: "negative backoffLimit", kind: "Job",
		breakIt: func(t *testing.T, obj map[string]any) { set(t, obj, int64(-1), "spec", "backoffLimit") },
		refused: `spec\.backoffLimit: Invalid value: -1`,
	},
	{
		name: "negative minAvailable", kind: "PodDisruptionBudget",
		breakIt: func(t *testing.T, obj map[string]any) { set(t, obj, int64(-1), "spec", "minAvailable") },
		refused: `spec\.minAvailable: Invalid value: -1`,
	},
	{
		name: "Deployment selector matching none of its Pods", kind: "Deployment",
		breakIt: func(t *testing.T, obj map[string]any) {
			set(t, obj, "replicas", "spec", "selector", "matchLabels", "app.kubernetes.io/component")
		},
		refused: "`selector` does not match template `labels`",
	},
	{
		name: "Service selector matching no Pod", kind: "Service",
		breakIt: func(t *testing.T, obj map[string]any) {
			set(t, obj, "replicas", "spec", "selector", "app.kubernetes.io/component")
		},
		caught: `the Service's selector .* picks Pods \[\], the Deployment's are \[stockguard-`,
	},
	{
		name: "Service port targeting no container port", kind: "Service",
		breakIt: func(t *testing.T, obj map[string]any) {
			ports, _, _ := unstructured.NestedSlice(obj, "spec", "ports")
			ports[0].(map[string]any)["targetPort"] = "htp"
			set(t, obj, ports, "spec", "ports")
		},
		caught: `the Service's port http targets htp`,
	},
	{
		name: "PodDisruptionBudget selector matching no Pod", kind: "PodDisruptionBudget",
		breakIt: func(t *testing.T, obj map[string]any) {
			set(t, obj, "replicas", "spec", "selector", "matchLabels", "app.kubernetes.io/component")
		},
		caught: `the PodDisruptionBudget counts 0 Pods, the Deployment has 3`,
	},
	{
		name: "privilege escalation allowed", kind: "Deployment",
		breakIt: func(t *testing.T, obj map[string]any) {
			set(t, container(t, obj), true, "securityContext", "allowPrivilegeEscalation")
		},
		caught: `the ReplicaSet made no Pod: .*violates PodSecurity "restricted:latest": allowPrivilegeEscalation`,
	},
	{
		name: "Secret without a key a Pod reads", kind: "Secret",
		breakIt: func(t *testing.T, obj map[string]any) {
			unstructured.RemoveNestedField(obj, "stringData", "redis-url")
		},
		caught: `a Pod reads key "redis-url" of Secret stockguard`,
	},
	{
		name: "probe on a port the container lacks", kind: "Deployment",
		breakIt: func(t *testing.T, obj map[string]any) {
			set(t, container(t, obj), "htp", "readinessProbe", "httpGet", "port")
		},
		caught: `container stockguard's readiness probe is on port htp`,
	},
}

// container returns the first container of a workload's Pod template, to be
// changed in place.
func container(t *testing.T, obj map[string]any) map[string]any {
	t.Helper()
	cs, _, err := unstructured.NestedFieldNoCopy(obj, "spec", "template", "spec", "containers")
	l, ok := cs.([]any)
	if err != nil || !ok || len(l) == 0 {
		t.Fatalf("no containers: %v", err)
	}
	return l[0].(map[string]any)
}

func set(t *testing.T, obj map[string]any, v any, path ...string) {
	t.Helper()
	if err := unstructured.SetNestedField(obj, v, path...); err != nil {
		t.Fatal(err)
	}
}

// rename moves the field from of the object at path to the name to.
func rename(t *testing.T, obj map[string]any, from, to string, path ...string) {
	t.Helper()
	parent, _, err := unstructured.NestedFieldNoCopy(obj, path...)
	m, ok := parent.(map[string]any)
	if len(path) == 0 {
		m, ok = obj, true
	}
	if err != nil || !ok {
		t.Fatalf("%v: %v", path, err)
	}
	v, had := m[from]
	if !had {
		t.Fatalf("no field %s at %v", from, path)
	}
	delete(m, from)
	m[to] = v
}
