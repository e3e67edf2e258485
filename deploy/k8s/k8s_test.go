// Package k8s_test checks the Kubernetes manifests of deploy/k8s without a
// cluster: each file is decoded strictly into its k8s.io/api type (a misspelt
// field fails), then held against the server's own routes and settings.
package k8s_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/orders"
)

// Settings of "stockguard serve" that the manifests are reckoned from; each is the
// default in cmd/stockguard/config.go.
const (
	defaultAddr           = ":8080"
	defaultRequestTimeout = 10 * time.Second
	containerName         = "stockguard"
)

// measuredPeakRSS is the highest peak RSS of a replica in BENCHMARKS.md (73.7
// MiB, redis-atomic under 256 virtual users): the memory request covers it.
var measuredPeakRSS = resource.MustParse("74Mi")

// manifests holds one object of each kind in deploy/k8s.
type manifests struct {
	deployment *appsv1.Deployment
	service    *corev1.Service
	secret     *corev1.Secret
	pdb        *policyv1.PodDisruptionBudget
	job        *batchv1.Job // the migration
	clients    *batchv1.Job // the storefront's client (clientsJob)
}

// clientsJob names the Job that makes the storefront's client.
const clientsJob = "stockguard-clients"

func (m manifests) clone() manifests {
	return manifests{m.deployment.DeepCopy(), m.service.DeepCopy(), m.secret.DeepCopy(), m.pdb.DeepCopy(), m.job.DeepCopy(), m.clients.DeepCopy()}
}

// jobContainers are the containers of both Jobs.
func (m manifests) jobContainers() []corev1.Container {
	return append(slices.Clone(m.job.Spec.Template.Spec.Containers), m.clients.Spec.Template.Spec.Containers...)
}

// decodeStrict decodes one YAML document into v: a duplicate key, a field the
// type does not have, or a second document is an error.
func decodeStrict(data []byte, v any) error {
	if docs := regexp.MustCompile(`(?m)^---`).FindAllIndex(data, -1); len(docs) > 1 ||
		len(docs) == 1 && len(bytes.TrimSpace(stripComments(data[:docs[0][0]]))) > 0 {
		return errors.New("more than one YAML document: keep one object per file")
	}
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func stripComments(b []byte) []byte {
	return regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAll(b, nil)
}

// load decodes every *.yaml file of this directory into its type.
func load(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m manifests
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(data, &head); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var obj any
		switch gvk := head.APIVersion + " " + head.Kind; gvk {
		case "apps/v1 Deployment":
			m.deployment = set(t, f, m.deployment)
			obj = m.deployment
		case "v1 Service":
			m.service = set(t, f, m.service)
			obj = m.service
		case "v1 Secret":
			m.secret = set(t, f, m.secret)
			obj = m.secret
		case "policy/v1 PodDisruptionBudget":
			m.pdb = set(t, f, m.pdb)
			obj = m.pdb
		case "batch/v1 Job":
			if head.Metadata.Name == clientsJob {
				m.clients = set(t, f, m.clients)
				obj = m.clients
				break
			}
			m.job = set(t, f, m.job)
			obj = m.job
		default:
			t.Fatalf("%s: %q is not a kind this test checks: add it here", f, gvk)
		}
		if err := decodeStrict(data, obj); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if m.deployment == nil || m.service == nil || m.secret == nil || m.pdb == nil || m.job == nil || m.clients == nil {
		t.Fatalf("want one Deployment, Service, Secret, PodDisruptionBudget, migration Job and %s Job in %v", clientsJob, files)
	}
	return m
}

// set returns a new object of a kind not seen before.
func set[T any](t *testing.T, file string, seen *T) *T {
	t.Helper()
	if seen != nil {
		t.Fatalf("%s: a second %T: keep one of each kind", file, *seen)
	}
	return new(T)
}

// getRoutes is every GET route of the server, as its gin engine has them.
func getRoutes(t *testing.T) map[string]bool {
	t.Helper()
	h := httpapi.New(httpapi.Config{}, httpapi.UseCases{}, nil, http.NotFoundHandler(), prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	engine, ok := h.(*gin.Engine)
	if !ok {
		t.Fatalf("httpapi.New returned %T, not *gin.Engine", h)
	}
	routes := map[string]bool{}
	for _, r := range engine.Routes() {
		if r.Method == http.MethodGet {
			routes[r.Path] = true
		}
	}
	if !routes["/healthz"] || !routes["/readyz"] {
		t.Fatalf("the server's GET routes %v lack /healthz or /readyz", routes)
	}
	return routes
}

// settingNames are the environment variables that "stockguard serve" and
// "migrate" read, from cmd/stockguard/config.go: a misspelt name would be
// ignored without a word.
func settingNames(t *testing.T) map[string]bool {
	t.Helper()
	src, err := os.ReadFile("../../cmd/stockguard/config.go")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{"GOMEMLIMIT": true} // the Go runtime's
	for _, m := range regexp.MustCompile(`"((?:STOCKGUARD_|DATABASE_URL|REDIS_URL)[A-Z_]*)"`).FindAllSubmatch(src, -1) {
		names[string(m[1])] = true
	}
	if len(names) < 20 || !names["STOCKGUARD_SHUTDOWN_TIMEOUT"] || !names["DATABASE_URL"] {
		t.Fatalf("found only %d setting names in cmd/stockguard/config.go: has the file changed?", len(names))
	}
	return names
}

// composeImage is the image that docker-compose.yml's replicas share.
func composeImage(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image string `json:"image"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(data, &compose); err != nil {
		t.Fatal(err)
	}
	image := compose.Services["replica1"].Image
	for _, r := range []string{"replica2", "replica3"} {
		if compose.Services[r].Image != image {
			t.Fatalf("docker-compose.yml: %s runs %q, replica1 %q", r, compose.Services[r].Image, image)
		}
	}
	if image == "" {
		t.Fatal("docker-compose.yml: replica1 names no image")
	}
	return image
}

// facts are what the checks compare the manifests with.
type facts struct {
	routes   map[string]bool
	settings map[string]bool
	image    string
}

// checks are the properties the manifests must have, each named for the tests
// that show it can fail.
var checks = []struct {
	name  string
	check func(m manifests, f facts) error
}{
	{"probes", checkProbes},
	{"addr", checkAddr},
	{"shutdown", checkShutdown},
	{"selectors", checkSelectors},
	{"secrets", checkSecrets},
	{"settings", checkSettings},
	{"job", checkJob},
	{"clients", checkClientsJob},
	{"image", checkImage},
	{"resources", checkResources},
}

func TestManifests(t *testing.T) {
	m := load(t)
	f := facts{getRoutes(t), settingNames(t), composeImage(t)}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if err := c.check(m, f); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestChecksCatchMistakes breaks the manifests one way at a time and expects the
// named check to say so: a check that passes everything would pass these too.
func TestChecksCatchMistakes(t *testing.T) {
	good := load(t)
	f := facts{getRoutes(t), settingNames(t), composeImage(t)}
	ctr := func(m manifests) *corev1.Container { return container(m.deployment) }
	env := func(m manifests, name string) *corev1.EnvVar {
		for i := range ctr(m).Env {
			if ctr(m).Env[i].Name == name {
				return &ctr(m).Env[i]
			}
		}
		t.Fatalf("no %s in the Deployment", name)
		return nil
	}
	cases := []struct {
		check, name string
		breakIt     func(m manifests)
	}{
		{"probes", "readiness on a path the server has not", func(m manifests) { ctr(m).ReadinessProbe.HTTPGet.Path = "/ready" }},
		{"probes", "liveness on readiness (restarts on a Redis outage)", func(m manifests) { ctr(m).LivenessProbe.HTTPGet.Path = "/readyz" }},
		{"probes", "probe on another port", func(m manifests) { ctr(m).ReadinessProbe.HTTPGet.Port = intstr.FromInt32(9090) }},
		{"probes", "probe on an unknown port name", func(m manifests) { ctr(m).StartupProbe.HTTPGet.Port = intstr.FromString("web") }},
		{"probes", "no liveness probe", func(m manifests) { ctr(m).LivenessProbe = nil }},
		{"addr", "listening on another port", func(m manifests) { env(m, "STOCKGUARD_ADDR").Value = ":9090" }},
		{"addr", "container port moved", func(m manifests) { ctr(m).Ports[0].ContainerPort = 8081 }},
		{"shutdown", "grace below shutdown + preStop", func(m manifests) { m.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr(int64(20)) }},
		{"shutdown", "no preStop pause", func(m manifests) { ctr(m).Lifecycle = nil }},
		{"shutdown", "shutdown timeout left to the default", func(m manifests) {
			c := ctr(m)
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "STOCKGUARD_SHUTDOWN_TIMEOUT" })
		}},
		{"shutdown", "shutdown below request timeout (serve refuses to start)", func(m manifests) { env(m, "STOCKGUARD_SHUTDOWN_TIMEOUT").Value = "5s" }},
		{"selectors", "Service selects nothing", func(m manifests) { m.service.Spec.Selector["app.kubernetes.io/component"] = "web" }},
		{"selectors", "Service selects the migration pod too", func(m manifests) { delete(m.service.Spec.Selector, "app.kubernetes.io/component") }},
		{"selectors", "Service port to another target", func(m manifests) { m.service.Spec.Ports[0].TargetPort = intstr.FromInt32(80) }},
		{"selectors", "PDB selects nothing", func(m manifests) { m.pdb.Spec.Selector.MatchLabels["app.kubernetes.io/name"] = "other" }},
		{"selectors", "PDB blocks every drain", func(m manifests) { m.pdb.Spec.MinAvailable = ptr(intstr.FromInt32(3)) }},
		{"selectors", "Deployment selector off its template", func(m manifests) { m.deployment.Spec.Template.Labels["app.kubernetes.io/component"] = "x" }},
		{"secrets", "a key the Secret has not", func(m manifests) { env(m, "DATABASE_URL").ValueFrom.SecretKeyRef.Key = "database_url" }},
		{"secrets", "another Secret", func(m manifests) { env(m, "REDIS_URL").ValueFrom.SecretKeyRef.Name = "redis" }},
		{"secrets", "a URL written into the manifest", func(m manifests) {
			*env(m, "DATABASE_URL") = corev1.EnvVar{Name: "DATABASE_URL", Value: "postgres://u:p@db/stockguard"}
		}},
		{"secrets", "the Job's key missing", func(m manifests) { m.job.Spec.Template.Spec.Containers[0].Env[0].ValueFrom.SecretKeyRef.Key = "db" }},
		{"settings", "a misspelt setting", func(m manifests) { env(m, "STOCKGUARD_ACCESS_LOG").Name = "STOCKGUARD_ACCESSLOG" }},
		{"settings", "text logs", func(m manifests) { env(m, "STOCKGUARD_LOG_FORMAT").Value = "text" }},
		{"job", "the Job serves", func(m manifests) { m.job.Spec.Template.Spec.Containers[0].Args = []string{"serve"} }},
		{"job", "the Job restarts forever", func(m manifests) { m.job.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways }},
		{"clients", "a key made in the Job (its secret in the log)", func(m manifests) {
			c := &m.clients.Spec.Template.Spec.Containers[0]
			c.Args = append(c.Args, "--with-key")
		}},
		{"clients", "the storefront with admin", func(m manifests) {
			c := &m.clients.Spec.Template.Spec.Containers[0]
			c.Args[len(c.Args)-1] += ",admin"
		}},
		{"clients", "a misspelt scope", func(m manifests) {
			c := &m.clients.Spec.Template.Spec.Containers[0]
			c.Args[len(c.Args)-1] = "orders:writes"
		}},
		{"clients", "the clients Job restarts forever", func(m manifests) { m.clients.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways }},
		{"secrets", "the clients Job's database written in", func(m manifests) {
			m.clients.Spec.Template.Spec.Containers[0].Env[0] = corev1.EnvVar{Name: "DATABASE_URL", Value: "postgres://u:p@db/stockguard"}
		}},
		{"image", "the clients Job on another image", func(m manifests) { m.clients.Spec.Template.Spec.Containers[0].Image = "stockguard:old" }},
		{"image", "another image than compose's", func(m manifests) { ctr(m).Image = "stockguard:latest" }},
		{"image", "the Job on another image", func(m manifests) { m.job.Spec.Template.Spec.Containers[0].Image = "stockguard:old" }},
		{"resources", "request below the measured RSS", func(m manifests) {
			ctr(m).Resources.Requests[corev1.ResourceMemory] = resource.MustParse("64Mi")
		}},
		{"resources", "GOMEMLIMIT at the limit", func(m manifests) { env(m, "GOMEMLIMIT").Value = "192MiB" }},
	}
	byName := map[string]func(manifests, facts) error{}
	for _, c := range checks {
		byName[c.name] = c.check
	}
	for _, c := range cases {
		t.Run(c.check+"/"+c.name, func(t *testing.T) {
			m := good.clone()
			c.breakIt(m)
			if err := byName[c.check](m, f); err == nil {
				t.Errorf("check %s passed manifests with %s", c.check, c.name)
			} else {
				t.Logf("caught: %v", err)
			}
		})
	}
}

// TestDecodeIsStrict shows that a misspelt or duplicated field fails to decode
// instead of being dropped.
func TestDecodeIsStrict(t *testing.T) {
	good, err := os.ReadFile("deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := decodeStrict(good, &d); err != nil {
		t.Fatalf("the real file: %v", err)
	}
	for name, bad := range map[string][]byte{
		"misspelt top field":     bytes.Replace(good, []byte("  replicas: 3"), []byte("  replica: 3"), 1),
		"misspelt probe field":   bytes.Replace(good, []byte("periodSeconds: 5"), []byte("periodSecond: 5"), 1),
		"field at a wrong level": bytes.Replace(good, []byte("  replicas: 3"), []byte("  replicas: 3\n  terminationGracePeriodSeconds: 30"), 1),
		"duplicate key":          bytes.Replace(good, []byte("  replicas: 3"), []byte("  replicas: 3\n  replicas: 2"), 1),
		"second document":        append(append([]byte{}, good...), []byte("---\nkind: Service\n")...),
	} {
		if bytes.Equal(bad, good) {
			t.Fatalf("%s: the edit did not apply: update this test", name)
		}
		if err := decodeStrict(bad, &appsv1.Deployment{}); err == nil {
			t.Errorf("%s: decoded without an error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func container(d *appsv1.Deployment) *corev1.Container {
	for i, c := range d.Spec.Template.Spec.Containers {
		if c.Name == containerName {
			return &d.Spec.Template.Spec.Containers[i]
		}
	}
	return nil
}

func envValue(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, e.ValueFrom == nil
		}
	}
	return "", false
}

// containerPort resolves a probe's or Service's port (a number or a name) to the
// container's port, 0 when it names none.
func containerPort(c *corev1.Container, p intstr.IntOrString) int32 {
	for _, cp := range c.Ports {
		if p.Type == intstr.Int && cp.ContainerPort == p.IntVal || p.Type == intstr.String && cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return 0
}

func listenPort(c *corev1.Container) (int32, error) {
	addr, ok := envValue(c, "STOCKGUARD_ADDR")
	if !ok {
		addr = defaultAddr
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("STOCKGUARD_ADDR %q: %w", addr, err)
	}
	var n int32
	if _, err := fmt.Sscan(port, &n); err != nil {
		return 0, fmt.Errorf("STOCKGUARD_ADDR %q: port: %w", addr, err)
	}
	return n, nil
}

func checkProbes(m manifests, f facts) error {
	c := container(m.deployment)
	if c == nil {
		return fmt.Errorf("no container %q in the Deployment", containerName)
	}
	port, err := listenPort(c)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range []struct {
		kind, want string // want: the path it must be, "" for any route
		probe      *corev1.Probe
	}{
		// Readiness checks the dependencies; liveness must not, or a Redis outage
		// would restart every replica and help nothing.
		{"readiness", "/readyz", c.ReadinessProbe},
		{"liveness", "/healthz", c.LivenessProbe},
		{"startup", "", c.StartupProbe},
	} {
		switch {
		case p.probe == nil && p.kind == "startup":
		case p.probe == nil || p.probe.HTTPGet == nil:
			errs = append(errs, fmt.Errorf("%s probe: want an HTTP GET", p.kind))
		case !f.routes[p.probe.HTTPGet.Path]:
			errs = append(errs, fmt.Errorf("%s probe: %s is not a GET route of the server", p.kind, p.probe.HTTPGet.Path))
		case p.want != "" && p.probe.HTTPGet.Path != p.want:
			errs = append(errs, fmt.Errorf("%s probe: %s, want %s", p.kind, p.probe.HTTPGet.Path, p.want))
		case containerPort(c, p.probe.HTTPGet.Port) != port:
			errs = append(errs, fmt.Errorf("%s probe: port %s is not the container port the server listens on (%d)", p.kind, p.probe.HTTPGet.Port.String(), port))
		}
	}
	return errors.Join(errs...)
}

func checkAddr(m manifests, _ facts) error {
	c := container(m.deployment)
	port, err := listenPort(c)
	if err != nil {
		return err
	}
	if got := containerPort(c, intstr.FromString("http")); got != port {
		return fmt.Errorf("container port http is %d, the server listens on %d", got, port)
	}
	return nil
}

func checkShutdown(m manifests, _ facts) error {
	c := container(m.deployment)
	v, ok := envValue(c, "STOCKGUARD_SHUTDOWN_TIMEOUT")
	if !ok {
		return errors.New("STOCKGUARD_SHUTDOWN_TIMEOUT is not set: the grace period is reckoned from it")
	}
	shutdown, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("STOCKGUARD_SHUTDOWN_TIMEOUT: %w", err)
	}
	request := defaultRequestTimeout
	if v, ok := envValue(c, "STOCKGUARD_REQUEST_TIMEOUT"); ok {
		if request, err = time.ParseDuration(v); err != nil {
			return fmt.Errorf("STOCKGUARD_REQUEST_TIMEOUT: %w", err)
		}
	}
	if shutdown < request {
		return fmt.Errorf("shutdown timeout %s below request timeout %s: serve refuses to start", shutdown, request)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 1 {
		return errors.New("want a preStop sleep, so endpoints drop the pod before SIGTERM")
	}
	pause := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	grace := m.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second <= shutdown+pause {
		return fmt.Errorf("terminationGracePeriodSeconds must be above shutdown timeout %s + preStop %s", shutdown, pause)
	}
	return nil
}

// matches says whether selector picks the pods with labels.
func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func checkSelectors(m manifests, _ facts) error {
	pod := m.deployment.Spec.Template.Labels
	job := m.job.Spec.Template.Labels
	var errs []error
	if s := m.deployment.Spec.Selector; s == nil || len(s.MatchExpressions) > 0 || !matches(s.MatchLabels, pod) {
		errs = append(errs, errors.New("the Deployment's selector does not match its pod template's labels"))
	}
	if !matches(m.service.Spec.Selector, pod) {
		errs = append(errs, errors.New("the Service's selector does not match the Deployment's pods"))
	}
	if matches(m.service.Spec.Selector, job) {
		errs = append(errs, errors.New("the Service's selector matches the migration Job's pod too"))
	}
	for _, p := range m.service.Spec.Ports {
		if containerPort(container(m.deployment), p.TargetPort) == 0 {
			errs = append(errs, fmt.Errorf("Service port %s: target %s is no port of the container", p.Name, p.TargetPort.String()))
		}
	}
	if s := m.pdb.Spec.Selector; s == nil || len(s.MatchExpressions) > 0 || !matches(s.MatchLabels, pod) || matches(s.MatchLabels, job) {
		errs = append(errs, errors.New("the PodDisruptionBudget's selector does not pick exactly the Deployment's pods"))
	}
	replicas := int32(1)
	if r := m.deployment.Spec.Replicas; r != nil {
		replicas = *r
	}
	// Below the replicas, or no drain could ever evict one.
	if mi := m.pdb.Spec.MinAvailable; mi == nil || mi.Type != intstr.Int || mi.IntVal < 2 || mi.IntVal >= replicas {
		errs = append(errs, fmt.Errorf("PodDisruptionBudget minAvailable %v: want 2 or more and below the %d replicas", mi, replicas))
	}
	return errors.Join(errs...)
}

func checkSecrets(m manifests, _ facts) error {
	keys := map[string]bool{}
	for k := range m.secret.Data {
		keys[k] = true
	}
	for k := range m.secret.StringData {
		keys[k] = true
	}
	var errs []error
	check := func(where string, c corev1.Container, mustBeSecret ...string) {
		for _, e := range c.Env {
			ref := (*corev1.SecretKeySelector)(nil)
			if e.ValueFrom != nil {
				ref = e.ValueFrom.SecretKeyRef
			}
			switch {
			case ref == nil && slices.Contains(mustBeSecret, e.Name):
				errs = append(errs, fmt.Errorf("%s: %s must come from the Secret", where, e.Name))
			case ref != nil && (ref.Name != m.secret.Name || !keys[ref.Key]):
				errs = append(errs, fmt.Errorf("%s: %s takes key %q of Secret %q, which %s has not", where, e.Name, ref.Key, ref.Name, m.secret.Name))
			}
			mustBeSecret = slices.DeleteFunc(mustBeSecret, func(n string) bool { return n == e.Name })
		}
		for _, n := range mustBeSecret {
			errs = append(errs, fmt.Errorf("%s: %s is not set", where, n))
		}
	}
	check("Deployment", *container(m.deployment), "DATABASE_URL", "REDIS_URL", "STOCKGUARD_ADMIN_TOKEN")
	for _, c := range m.jobContainers() {
		check("Job", c, "DATABASE_URL")
	}
	return errors.Join(errs...)
}

func checkSettings(m manifests, f facts) error {
	var errs []error
	containers := append([]corev1.Container{*container(m.deployment)}, m.jobContainers()...)
	for _, c := range containers {
		for _, e := range c.Env {
			if !f.settings[e.Name] {
				errs = append(errs, fmt.Errorf("container %s: %s is no setting of stockguard", c.Name, e.Name))
			}
		}
		if c.Name == "clients" { // the CLI logs warnings only, as text on stderr; its output is JSON
			continue
		}
		if v, _ := envValue(&c, "STOCKGUARD_LOG_FORMAT"); v != "json" {
			errs = append(errs, fmt.Errorf("container %s: STOCKGUARD_LOG_FORMAT %q, want json", c.Name, v))
		}
	}
	if v, _ := envValue(container(m.deployment), "STOCKGUARD_ACCESS_LOG"); v != "true" {
		errs = append(errs, fmt.Errorf("STOCKGUARD_ACCESS_LOG %q, want true", v))
	}
	return errors.Join(errs...)
}

func checkJob(m manifests, _ facts) error {
	spec := m.job.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		return fmt.Errorf("the Job has %d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	if len(c.Command) > 0 || !slices.Equal(c.Args, []string{"migrate"}) {
		return fmt.Errorf("the Job runs command %q args %q, want the image's entrypoint with args [migrate]", c.Command, c.Args)
	}
	if spec.RestartPolicy != corev1.RestartPolicyNever && spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		return fmt.Errorf("the Job's restartPolicy %q: want Never or OnFailure", spec.RestartPolicy)
	}
	if args := container(m.deployment).Args; !slices.Equal(args, []string{"serve"}) {
		return fmt.Errorf("the Deployment runs %q, want [serve]", args)
	}
	return nil
}

// checkClientsJob: the clients Job runs "clients create" with scopes the
// service knows, never admin (the storefront's key is not the operator's),
// and makes no key (its secret would be in the pod's log); it does not
// restart forever.
func checkClientsJob(m manifests, _ facts) error {
	spec := m.clients.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		return fmt.Errorf("the clients Job has %d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	if len(c.Command) > 0 || len(c.Args) < 2 || c.Args[0] != "clients" || c.Args[1] != "create" {
		return fmt.Errorf("the clients Job runs command %q args %q, want the image's entrypoint with clients create", c.Command, c.Args)
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--with-key") || strings.HasPrefix(a, "--key-file") }) {
		return fmt.Errorf("the clients Job makes a key (%q): its secret would be in the pod's log", c.Args)
	}
	i := slices.Index(c.Args, "--scopes")
	if i < 0 || i+1 >= len(c.Args) {
		return fmt.Errorf("the clients Job names no --scopes: %q", c.Args)
	}
	for s := range strings.SplitSeq(c.Args[i+1], ",") {
		switch {
		case s == string(orders.ScopeAdmin):
			return errors.New("the clients Job gives the storefront admin")
		case !slices.Contains(orders.Scopes, orders.Scope(s)):
			return fmt.Errorf("the clients Job names the scope %q, which the service has not", s)
		}
	}
	if spec.RestartPolicy != corev1.RestartPolicyNever && spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		return fmt.Errorf("the clients Job's restartPolicy %q: want Never or OnFailure", spec.RestartPolicy)
	}
	return nil
}

func checkImage(m manifests, f facts) error {
	if got := container(m.deployment).Image; got != f.image {
		return fmt.Errorf("the Deployment runs %q, docker-compose.yml's replicas %q", got, f.image)
	}
	for _, c := range m.jobContainers() {
		if c.Image != f.image {
			return fmt.Errorf("the Job runs %q, the replicas %q", c.Image, f.image)
		}
	}
	return nil
}

func checkResources(m manifests, _ facts) error {
	c := container(m.deployment)
	req, lim := c.Resources.Requests[corev1.ResourceMemory], c.Resources.Limits[corev1.ResourceMemory]
	if req.Cmp(measuredPeakRSS) < 0 {
		return fmt.Errorf("memory request %s below the measured peak RSS %s", req.String(), measuredPeakRSS.String())
	}
	if lim.Cmp(req) < 0 {
		return fmt.Errorf("memory limit %s below the request %s", lim.String(), req.String())
	}
	if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
		return errors.New("no CPU request: the scheduler would place replicas anywhere")
	}
	if v, ok := envValue(c, "GOMEMLIMIT"); ok {
		// Go writes MiB where Kubernetes writes Mi.
		soft, err := resource.ParseQuantity(strings.Replace(v, "iB", "i", 1))
		if err != nil {
			return fmt.Errorf("GOMEMLIMIT %q: %w", v, err)
		}
		if soft.Cmp(lim) >= 0 {
			return fmt.Errorf("GOMEMLIMIT %s at or above the memory limit %s: the binary's pages count too", v, lim.String())
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
