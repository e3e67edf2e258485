// Package cluster_test applies the manifests of deploy/k8s to a real
// Kubernetes control plane (kube-apiserver, kube-controller-manager and
// kube-scheduler of scripts/kube, on a private etcd) and checks what the
// cluster makes of them: server-side apply, dry run then for real, into a
// namespace that enforces the "restricted" Pod Security Standard; the
// Deployment's ReplicaSet and Pods, scheduled onto a node; the Service's
// EndpointSlice and the PodDisruptionBudget's counts once the Pods are ready;
// the two Jobs' Pods; the Secret's keys. Copies of the manifests with one
// mistake each must be refused by the API server or caught by these checks.
//
// There is no kubelet: the test stands in for one by marking the Deployment's
// Pods running and ready with an address each, so that the controllers that
// count ready Pods have something to count. Nothing runs the image.
package cluster_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/stockguard/stockguard/internal/testenv"
)

var getOptions = metav1.GetOptions{}

// fieldManager is the name the test's applies are recorded under.
const fieldManager = "stockguard-test"

// nodeName is the one Node of the cluster: an object, with no kubelet behind it.
const nodeName = "stockguard-test-node"

// settleBound bounds each wait for the controllers: they act within a second
// or two on an idle machine; the bound is for a loaded CI machine.
const settleBound = 90 * time.Second

func TestManifestsOnAControlPlane(t *testing.T) {
	cp := startControlPlane(t)
	createNode(t, cp)
	want := loadManifests(t)

	t.Run("as written", func(t *testing.T) {
		ns := cp.namespace(t)
		ctx := testContext(t)
		// A dry run creates nothing, and is refused as the real apply would be.
		for _, m := range want {
			if w, err := cp.apply(ctx, ns, m, true); err != nil || len(w) > 0 {
				t.Fatalf("dry run of %s: %v, warnings %q", m.file, err, w)
			}
		}
		for _, m := range want {
			if _, err := cp.get(ctx, ns, m.obj); !apierrors.IsNotFound(err) {
				t.Fatalf("%s after a dry run: %v, want NotFound", m.file, err)
			}
		}
		for _, m := range want {
			if w, err := cp.apply(ctx, ns, m, false); err != nil || len(w) > 0 {
				t.Fatalf("apply %s: %v, warnings %q", m.file, err, w)
			}
		}
		r := cp.inspect(t, ns, want)
		for _, p := range r.problems {
			t.Error(p)
		}
		t.Logf("%s", r.summary)
	})

	// Each copy has one mistake; each must be refused by the API server (an
	// error of the apply, dry run included, naming the field) or caught by
	// the checks above (a problem matching caught).
	for _, bc := range brokenCopies {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			ns := cp.namespace(t)
			ctx := testContext(t)
			ms := cloneManifests(want)
			var warned []string
			changed := false
			for _, m := range ms {
				if m.kind() == bc.kind {
					bc.breakIt(t, m.obj.Object)
					changed = true
				}
			}
			if !changed {
				t.Fatalf("no %s in deploy/k8s to break", bc.kind)
			}
		applies:
			for _, dryRun := range []bool{true, false} {
				for _, m := range ms {
					w, err := cp.apply(ctx, ns, m, dryRun)
					if m.kind() != bc.kind {
						if err != nil {
							t.Fatalf("apply %s (unchanged): %v", m.file, err)
						}
						continue
					}
					if bc.refused != "" {
						if err == nil || !regexp.MustCompile(bc.refused).MatchString(err.Error()) {
							t.Fatalf("apply %s (dry run %v): %v, want an error matching %q", m.file, dryRun, err, bc.refused)
						}
						t.Logf("refused (dry run %v): %v", dryRun, err)
						continue applies // the real apply must be refused too
					}
					if err != nil {
						t.Fatalf("apply %s (dry run %v): %v, want it accepted and the mistake caught after", m.file, dryRun, err)
					}
					for _, x := range w {
						warned = append(warned, "the API server warned: "+x)
					}
				}
			}
			if bc.refused != "" {
				return
			}
			r := cp.inspect(t, ns, ms)
			problems := slices.Concat(r.problems, warned)
			re := regexp.MustCompile(bc.caught)
			if !slices.ContainsFunc(problems, re.MatchString) {
				t.Fatalf("not caught: no problem matches %q; the problems: %q", bc.caught, problems)
			}
			t.Logf("caught: %q", problems)
		})
	}
}

// testContext bounds one scenario's calls.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 4*settleBound)
	t.Cleanup(cancel)
	return ctx
}

// manifest is one file of deploy/k8s, as the API server is sent it.
type manifest struct {
	file string
	obj  *unstructured.Unstructured
}

func (m manifest) kind() string { return m.obj.GetKind() }

// loadManifests reads every *.yaml of deploy/k8s, in the order kubectl apply
// -f takes a folder (by name).
func loadManifests(t *testing.T) []manifest {
	t.Helper()
	files, err := filepath.Glob("../*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("deploy/k8s/*.yaml: %v (%d files)", err, len(files))
	}
	sort.Strings(files)
	var out []manifest
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		j, err := yaml.YAMLToJSONStrict(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(j); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, manifest{file: filepath.Base(f), obj: obj})
	}
	return out
}

func cloneManifests(ms []manifest) []manifest {
	out := make([]manifest, len(ms))
	for i, m := range ms {
		out[i] = manifest{m.file, m.obj.DeepCopy()}
	}
	return out
}

// namespace creates a namespace of the test's own that enforces the
// "restricted" Pod Security Standard (and warns and audits by it), as a
// hardened cluster's would, and deletes it when the test ends.
func (cp *controlPlane) namespace(t *testing.T) string {
	t.Helper()
	name := "sg-" + strings.ToLower(testenv.RandomID())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
		"pod-security.kubernetes.io/warn":            "restricted",
		"pod-security.kubernetes.io/warn-version":    "latest",
		"pod-security.kubernetes.io/audit":           "restricted",
	}}}
	ctx := testContext(t)
	if _, err := cp.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cp.client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	})
	// Pods are admitted once the controller manager has made the namespace's
	// default ServiceAccount.
	waitUntil(t, cp.dir, settleBound, "the default ServiceAccount of "+name, func(ctx context.Context) error {
		_, err := cp.client.CoreV1().ServiceAccounts(name).Get(ctx, "default", getOptions)
		return err
	})
	return name
}

// apply sends m to the API server as `kubectl apply --server-side` does (a
// field manager of its own, conflicts forced), dry run or for real, and
// returns the warnings of the answer.
func (cp *controlPlane) apply(ctx context.Context, ns string, m manifest, dryRun bool) ([]string, error) {
	mapping, err := cp.mapper.RESTMapping(m.obj.GroupVersionKind().GroupKind(), m.obj.GroupVersionKind().Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.file, err)
	}
	// A client of its own, to hear this answer's warnings alone.
	w := &warnings{}
	cfg := rest.CopyConfig(cp.config)
	cfg.WarningHandler = w
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	obj := m.obj.DeepCopy()
	obj.SetNamespace(ns)
	_, err = dyn.Resource(mapping.Resource).Namespace(ns).Apply(ctx, obj.GetName(), obj, opts)
	return w.all(), err
}

// get reads the object m names back from the API server.
func (cp *controlPlane) get(ctx context.Context, ns string, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	mapping, err := cp.mapper.RESTMapping(obj.GroupVersionKind().GroupKind(), obj.GroupVersionKind().Version)
	if err != nil {
		return nil, err
	}
	return cp.dyn.Resource(mapping.Resource).Namespace(ns).Get(ctx, obj.GetName(), getOptions)
}

// createNode registers the cluster's one Node, ready, with room for every
// scenario's Pods: the scheduler binds Pods to it, and nothing runs them.
func createNode(t *testing.T, cp *controlPlane) {
	t.Helper()
	room := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	now := metav1.Now()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{
			"kubernetes.io/hostname": nodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		}},
		Status: corev1.NodeStatus{
			Capacity: room, Allocatable: room,
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: now, LastTransitionTime: now,
			}},
		},
	}
	ctx := testContext(t)
	created, err := cp.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(created.Status.Conditions) == 0 { // a server that drops status on create
		created.Status = node.Status
		if _, err := cp.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// report is what inspect found.
type report struct {
	problems []string
	summary  string
}

// inspect waits until the controllers have acted on the manifests applied to
// ns, standing in for the kubelet where they need one, and returns every way
// in which what the cluster made differs from what the manifests ask.
func (cp *controlPlane) inspect(t *testing.T, ns string, applied []manifest) report {
	t.Helper()
	ctx := testContext(t)
	var r report
	problem := func(format string, args ...any) { r.problems = append(r.problems, fmt.Sprintf(format, args...)) }

	// Every field of every manifest is in what the server stored: nothing
	// dropped, renamed or changed by defaulting and admission.
	for _, m := range applied {
		got, err := cp.get(ctx, ns, m.obj)
		if err != nil {
			problem("%s: %v", m.file, err)
			continue
		}
		want := m.obj.Object
		if m.kind() == "Secret" {
			want = secretData(want)
		}
		for _, d := range subset(m.kind(), want, got.Object) {
			problem("%s as stored: %s", m.file, d)
		}
	}

	deploy, err := cp.client.AppsV1().Deployments(ns).Get(ctx, "stockguard", getOptions)
	if err != nil {
		problem("the Deployment: %v", err)
		r.summary = "no Deployment"
		return r
	}
	replicas := int(*deploy.Spec.Replicas)
	selector, err := metav1.LabelSelectorAsSelector(deploy.Spec.Selector)
	if err != nil {
		problem("the Deployment's selector: %v", err)
		return r
	}

	// The Deployment's ReplicaSet, and its Pods scheduled onto the node; or
	// the ReplicaSet's reason for making none.
	var rs *appsv1.ReplicaSet
	var pods []corev1.Pod
	var failure string
	settled := wait(ctx, settleBound, func(ctx context.Context) bool {
		rs, pods, failure = cp.replicaSet(ctx, ns, deploy, selector)
		if failure != "" {
			return true
		}
		if rs == nil || len(pods) != replicas {
			return false
		}
		for _, p := range pods {
			if p.Spec.NodeName == "" {
				return false
			}
		}
		return true
	})
	switch {
	case failure != "":
		problem("the ReplicaSet made no Pod: %s", failure)
		r.summary = "no Pods"
		return r
	case !settled:
		problem("the Deployment has %d of %d Pods scheduled after %s (ReplicaSet %v)", len(pods), replicas, settleBound, rs != nil)
		return r
	}
	template, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&deploy.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&p)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range subset("template", template, obj) {
			problem("Pod %s differs from the Deployment's template: %s", p.Name, d)
		}
		if p.Spec.NodeName != nodeName {
			problem("Pod %s scheduled onto %q", p.Name, p.Spec.NodeName)
		}
	}
	problems := checkPodSpec("the Deployment", deploy.Spec.Template.Spec)

	// The kubelet's part: each Pod running, ready, with an address.
	ips := map[string]string{}
	for i, p := range pods {
		ip := fmt.Sprintf("10.244.%d.%d", len(ns)%250, i+10)
		ips[p.Name] = ip
		if err := markReady(ctx, cp, &p, ip); err != nil {
			problem("mark Pod %s ready: %v", p.Name, err)
			return r
		}
	}
	if !wait(ctx, settleBound, func(ctx context.Context) bool {
		d, err := cp.client.AppsV1().Deployments(ns).Get(ctx, deploy.Name, getOptions)
		return err == nil && int(d.Status.AvailableReplicas) == replicas && d.Status.ObservedGeneration == d.Generation
	}) {
		problem("the Deployment did not count its %d ready Pods available within %s", replicas, settleBound)
	}

	// The Service's selector: the Deployment's Pods, no more, no fewer, and
	// the EndpointSlice controller lists their addresses on the named port's
	// number.
	svc, err := cp.client.CoreV1().Services(ns).Get(ctx, "stockguard", getOptions)
	if err != nil {
		problem("the Service: %v", err)
	} else {
		r.problems = append(r.problems, cp.checkService(ctx, ns, svc, pods, ips)...)
	}

	// The PodDisruptionBudget counts the Deployment's Pods.
	pdb, err := cp.client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "stockguard", getOptions)
	if err != nil {
		problem("the PodDisruptionBudget: %v", err)
	} else {
		r.problems = append(r.problems, cp.checkPDB(ctx, ns, pdb, replicas)...)
	}

	// Each Job's Pod, admitted in the restricted namespace, as its template.
	jobs, err := cp.client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		problem("the Jobs: %v", err)
		return r
	}
	refs := secretRefs(deploy.Spec.Template.Spec)
	for _, job := range jobs.Items {
		var jp []corev1.Pod
		if !wait(ctx, settleBound, func(ctx context.Context) bool {
			l, err := cp.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
			if err != nil {
				return false
			}
			jp = l.Items
			return len(jp) > 0
		}) {
			problem("Job %s made no Pod within %s", job.Name, settleBound)
			continue
		}
		jt, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(&job.Spec.Template)
		po, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(&jp[0])
		for _, d := range subset("template", jt, po) {
			problem("Job %s's Pod differs from its template: %s", job.Name, d)
		}
		problems = append(problems, checkPodSpec("Job "+job.Name, job.Spec.Template.Spec)...)
		refs = append(refs, secretRefs(job.Spec.Template.Spec)...)
	}
	r.problems = append(r.problems, problems...)

	// The Secret has every key a Pod reads, and no key none reads.
	sec, err := cp.client.CoreV1().Secrets(ns).Get(ctx, "stockguard", getOptions)
	if err != nil {
		problem("the Secret: %v", err)
	} else {
		r.problems = append(r.problems, checkSecret(sec, refs)...)
	}
	r.summary = fmt.Sprintf("Deployment %s: ReplicaSet %s, %d Pods on %s, available %d; %d Jobs with their Pods; Secret keys %v",
		deploy.Name, rs.Name, len(pods), nodeName, replicas, len(jobs.Items), keys(sec))
	return r
}

// replicaSet returns the ReplicaSet the Deployment controls, with the Pods it
// controls, or the reason it gives for making none (its ReplicaFailure
// condition, which Pod Security's refusal sets).
func (cp *controlPlane) replicaSet(ctx context.Context, ns string, d *appsv1.Deployment, sel labels.Selector) (*appsv1.ReplicaSet, []corev1.Pod, string) {
	l, err := cp.client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, nil, ""
	}
	var rs *appsv1.ReplicaSet
	for i := range l.Items {
		if c := metav1.GetControllerOf(&l.Items[i]); c != nil && c.UID == d.UID {
			rs = &l.Items[i]
		}
	}
	if rs == nil {
		return nil, nil, ""
	}
	for _, c := range rs.Status.Conditions {
		if c.Type == appsv1.ReplicaSetReplicaFailure && c.Status == corev1.ConditionTrue {
			return rs, nil, c.Message
		}
	}
	pl, err := cp.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return rs, nil, ""
	}
	var pods []corev1.Pod
	for _, p := range pl.Items {
		if c := metav1.GetControllerOf(&p); c != nil && c.UID == rs.UID {
			pods = append(pods, p)
		}
	}
	return rs, pods, ""
}

// markReady does what the kubelet would once the Pod's containers passed
// their probes: running, ready, with an address.
func markReady(ctx context.Context, cp *controlPlane, p *corev1.Pod, ip string) error {
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.HostIP, p.Status.HostIPs = "10.0.0.2", []corev1.HostIP{{IP: "10.0.0.2"}}
	p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	p.Status.StartTime = &now
	for _, c := range []corev1.PodConditionType{corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	started := true
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "stockguard-test", Ready: true, Started: &started,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	_, err := cp.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

// checkService compares the Pods the Service's selector picks with the
// Deployment's, and waits for the EndpointSlice controller to list what the
// selector picks before it compares that too.
func (cp *controlPlane) checkService(ctx context.Context, ns string, svc *corev1.Service, pods []corev1.Pod, ips map[string]string) []string {
	var out []string
	l, err := cp.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
	if err != nil {
		return []string{fmt.Sprintf("the Service's Pods: %v", err)}
	}
	var picked, want []string
	var wantIPs []string
	for _, p := range l.Items {
		picked = append(picked, p.Name)
		if ip, ok := ips[p.Name]; ok {
			wantIPs = append(wantIPs, ip)
		}
	}
	for _, p := range pods {
		want = append(want, p.Name)
	}
	slices.Sort(picked)
	slices.Sort(want)
	slices.Sort(wantIPs)
	if !slices.Equal(picked, want) {
		out = append(out, fmt.Sprintf("the Service's selector %v picks Pods %v, the Deployment's are %v", svc.Spec.Selector, picked, want))
	}
	// Each port's target is a port of the Deployment's container.
	var ports []int32
	for _, sp := range svc.Spec.Ports {
		port, ok := containerPort(pods[0].Spec, sp.TargetPort.String())
		if !ok {
			out = append(out, fmt.Sprintf("the Service's port %s targets %s, which the Deployment's Pods do not have", sp.Name, sp.TargetPort.String()))
			continue
		}
		ports = append(ports, port)
	}
	if len(out) > 0 {
		return out // the EndpointSlice controller's view of a broken Service is not the point
	}
	// What the EndpointSlice controller made of the selector and the ports.
	var gotIPs []string
	var gotPorts []int32
	if !wait(ctx, settleBound, func(ctx context.Context) bool {
		sl, err := cp.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
		if err != nil || len(sl.Items) == 0 {
			return false
		}
		gotIPs, gotPorts = nil, nil
		for _, s := range sl.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					gotIPs = append(gotIPs, e.Addresses...)
				}
			}
			for _, p := range s.Ports {
				if p.Port != nil {
					gotPorts = append(gotPorts, *p.Port)
				}
			}
		}
		slices.Sort(gotIPs)
		return slices.Equal(gotIPs, wantIPs) && (len(wantIPs) == 0 || slices.Equal(gotPorts, ports))
	}) {
		out = append(out, fmt.Sprintf("the Service's EndpointSlices list %v on ports %v after %s; its selector picks %v on %v", gotIPs, gotPorts, settleBound, wantIPs, ports))
	}
	if len(gotIPs) != len(pods) {
		out = append(out, fmt.Sprintf("the Service's endpoints are %d ready addresses, the Deployment has %d ready Pods", len(gotIPs), len(pods)))
	}
	return out
}

// checkPDB waits for the disruption controller to count the Pods the budget
// selects, then compares the count with the Deployment's.
func (cp *controlPlane) checkPDB(ctx context.Context, ns string, pdb *policyv1.PodDisruptionBudget, replicas int) []string {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return []string{fmt.Sprintf("the PodDisruptionBudget's selector: %v", err)}
	}
	var st policyv1.PodDisruptionBudgetStatus
	var selected int
	if !wait(ctx, settleBound, func(ctx context.Context) bool {
		p, err := cp.client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, pdb.Name, getOptions)
		if err != nil {
			return false
		}
		l, err := cp.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return false
		}
		st, selected = p.Status, len(l.Items)
		return st.ObservedGeneration == p.Generation && int(st.ExpectedPods) == selected && int(st.CurrentHealthy) == selected
	}) {
		return []string{fmt.Sprintf("the PodDisruptionBudget's status %+v after %s; its selector picks %d Pods", st, settleBound, selected)}
	}
	minAvailable := pdb.Spec.MinAvailable.IntValue()
	var out []string
	if int(st.ExpectedPods) != replicas {
		out = append(out, fmt.Sprintf("the PodDisruptionBudget counts %d Pods, the Deployment has %d", st.ExpectedPods, replicas))
	}
	if int(st.DesiredHealthy) != minAvailable || int(st.DisruptionsAllowed) != replicas-minAvailable {
		out = append(out, fmt.Sprintf("the PodDisruptionBudget wants %d healthy and allows %d disruptions; with %d ready Pods and minAvailable %d, want %d and %d",
			st.DesiredHealthy, st.DisruptionsAllowed, replicas, minAvailable, minAvailable, replicas-minAvailable))
	}
	return out
}

// checkPodSpec checks what the API server does not: each probe's named port
// is a port of its container.
func checkPodSpec(owner string, spec corev1.PodSpec) []string {
	var out []string
	for _, c := range spec.Containers {
		for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
			if p == nil || p.HTTPGet == nil {
				continue
			}
			if _, ok := containerPort(corev1.PodSpec{Containers: []corev1.Container{c}}, p.HTTPGet.Port.String()); !ok {
				out = append(out, fmt.Sprintf("%s: container %s's %s probe is on port %s, which it does not have", owner, c.Name, name, p.HTTPGet.Port.String()))
			}
		}
	}
	return out
}

// containerPort resolves a port by name or number among the Pod's containers.
func containerPort(spec corev1.PodSpec, port string) (int32, bool) {
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			if p.Name == port || fmt.Sprint(p.ContainerPort) == port {
				return p.ContainerPort, true
			}
		}
	}
	return 0, false
}

// secretRef is one key a container reads from a Secret.
type secretRef struct{ secret, key string }

func secretRefs(spec corev1.PodSpec) []secretRef {
	var out []secretRef
	for _, c := range spec.Containers {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				out = append(out, secretRef{e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key})
			}
		}
	}
	return out
}

// checkSecret: every key a Pod reads is in the Secret (the kubelet would not
// start the container otherwise), and every key of it is read by some Pod.
func checkSecret(sec *corev1.Secret, refs []secretRef) []string {
	var out []string
	read := map[string]bool{}
	for _, r := range refs {
		if r.secret != sec.Name {
			out = append(out, fmt.Sprintf("a Pod reads Secret %s, which deploy/k8s does not have", r.secret))
			continue
		}
		read[r.key] = true
		if _, ok := sec.Data[r.key]; !ok {
			out = append(out, fmt.Sprintf("a Pod reads key %q of Secret %s, which has only %v", r.key, sec.Name, keys(sec)))
		}
	}
	for k := range sec.Data {
		if !read[k] {
			out = append(out, fmt.Sprintf("Secret %s has key %q, which no Pod reads", sec.Name, k))
		}
	}
	return out
}

func keys(sec *corev1.Secret) []string {
	if sec == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(sec.Data))
}

// secretData returns a Secret manifest as the server stores it: stringData
// moved into data, base64-encoded.
func secretData(obj map[string]any) map[string]any {
	out := runtime.DeepCopyJSON(obj)
	sd, _ := out["stringData"].(map[string]any)
	delete(out, "stringData")
	data, _ := out["data"].(map[string]any)
	if data == nil {
		data = map[string]any{}
	}
	for k, v := range sd {
		data[k] = base64.StdEncoding.EncodeToString([]byte(fmt.Sprint(v)))
	}
	out["data"] = data
	return out
}

// subset returns where got lacks or differs from a field of want: maps key by
// key, lists item by item, scalars by their JSON (a number is a number
// whether decoded as int64 or float64), quantities by value.
func subset(path string, want, got any) []string {
	switch w := want.(type) {
	case nil: // a null of a typed object converted (an unset creationTimestamp): nothing asked
		return nil
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: an object, got %s", path, short(got))}
		}
		var out []string
		for _, k := range slices.Sorted(maps.Keys(w)) {
			out = append(out, subset(path+"."+k, w[k], g[k])...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: %d items, got %s", path, len(w), short(got))}
		}
		var out []string
		for i := range w {
			out = append(out, subset(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	}
	wj, _ := json.Marshal(want)
	gj, _ := json.Marshal(got)
	if string(wj) == string(gj) {
		return nil
	}
	if ws, ok := want.(string); ok && strings.Contains(path, ".resources.") {
		if gs, ok := got.(string); ok {
			wq, err1 := resource.ParseQuantity(ws)
			gq, err2 := resource.ParseQuantity(gs)
			if err1 == nil && err2 == nil && wq.Cmp(gq) == 0 {
				return nil
			}
		}
	}
	return []string{fmt.Sprintf("%s: %s, got %s", path, wj, short(got))}
}

func short(v any) string {
	if v == nil {
		return "nothing"
	}
	b, _ := json.Marshal(v)
	if len(b) > 120 {
		return string(b[:120]) + "..."
	}
	return string(b)
}

// wait polls cond every 100 ms until it holds or limit passes.
func wait(ctx context.Context, limit time.Duration, cond func(context.Context) bool) bool {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		if cond(ctx) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond): // polling the API server, within limit
		}
	}
}
