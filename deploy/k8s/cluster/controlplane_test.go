package cluster_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

// binEnv names the folder that holds kube-apiserver, kube-controller-manager
// and kube-scheduler: what scripts/kube/build.sh prints.
const binEnv = "STOCKGUARD_TEST_KUBE_BIN"

// kubeVersion is the version scripts/kube builds, which docs/operations.md
// names; the API server must report it.
const kubeVersion = "v1.37.2"

// servers are the control plane's programs, as named in binEnv's folder.
var servers = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// controlPlane is a private Kubernetes control plane on loopback: an etcd, the
// API server, the controller manager and the scheduler, each a process of its
// own, with no kubelet: Pods are created, scheduled or refused, never run.
type controlPlane struct {
	dir    string
	config *rest.Config // as the cluster's administrator (system:masters)
	client kubernetes.Interface
	dyn    dynamic.Interface // for objects of any kind, as read from deploy/k8s
	mapper meta.RESTMapper
}

// kubeBinaries returns binEnv's folder, or ends the test: skipped with the
// way to get the binaries, or failed under STOCKGUARD_TEST_REQUIRE_REAL=1.
func kubeBinaries(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(binEnv)
	missing := ""
	if dir == "" {
		missing = binEnv + " is not set"
	} else {
		for _, s := range servers {
			if _, err := os.Stat(filepath.Join(dir, s)); err != nil {
				missing = fmt.Sprintf("%s=%s has no %s", binEnv, dir, s)
				break
			}
		}
	}
	if missing == "" {
		return dir
	}
	// Skipped, or failed under STOCKGUARD_TEST_REQUIRE_REAL=1, as every test
	// whose server is missing.
	lockservertest.SkipNotInstalled(t, fmt.Errorf("%w: %s: `make test-kube` builds Kubernetes %s once (scripts/kube/build.sh, 15-20 minutes on 2 cores) and runs this test",
		lockserver.ErrNotInstalled, missing, kubeVersion))
	return ""
}

// startControlPlane starts etcd, then the three servers, and returns once the
// API server is ready and the controller manager has made the default
// namespace's ServiceAccount. All of it stops when the test ends.
func startControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	bin := kubeBinaries(t)
	etcd := lockservertest.Etcd(t)
	dir := t.TempDir()
	pki := newPKI(t, dir)

	port := lockservertest.FreePort(t)
	host := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	apiserver := start(t, dir, filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers=http://"+etcd.Addr,
		"--bind-address=127.0.0.1",
		// The "kubernetes" Service's endpoints would be this address, which
		// may not be a loopback one; nothing here dials that Service.
		"--endpoint-reconciler-type=none",
		"--secure-port="+strconv.Itoa(port),
		"--tls-cert-file="+pki.serverCert,
		"--tls-private-key-file="+pki.serverKey,
		"--client-ca-file="+pki.caCert,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki.saKey,
		"--service-account-signing-key-file="+pki.saKey,
		"--service-cluster-ip-range=10.96.0.0/24",
		"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
		"--profiling=false",
	)
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	writeKubeconfig(t, kubeconfig, "https://"+host, pki)
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	config.QPS, config.Burst = 200, 400 // one client for the whole test, on loopback
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	begun := time.Now()
	waitUntil(t, dir, time.Minute, "the API server ready", func(ctx context.Context) error {
		_, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}, apiserver)
	apiReady := time.Since(begun)
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != kubeVersion {
		t.Fatalf("the API server is %s, not the %s scripts/kube builds", v.GitVersion, kubeVersion)
	}

	// Neither serves HTTPS (--secure-port=0): the test asks the API server
	// what they did, as an operator would.
	kcm := start(t, dir, filepath.Join(bin, "kube-controller-manager"),
		"--kubeconfig="+kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--service-account-private-key-file="+pki.saKey,
		"--root-ca-file="+pki.caCert,
		"--use-service-account-credentials=false",
		// The Node has no kubelet to renew its lease: it must not be counted
		// lost (and tainted, so that nothing more is scheduled) while a slow
		// machine is still running the scenarios.
		"--node-monitor-grace-period=15m",
		"--concurrent-deployment-syncs=10",
		"--concurrent-replicaset-syncs=10",
		"--profiling=false",
	)
	schedulerConfig := filepath.Join(dir, "scheduler.yaml")
	writeFile(t, schedulerConfig, []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: `+kubeconfig+`
leaderElection:
  leaderElect: false
`))
	scheduler := start(t, dir, filepath.Join(bin, "kube-scheduler"), "--config="+schedulerConfig, "--secure-port=0")

	disc, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	cp := &controlPlane{
		dir: dir, config: config, client: client, dyn: dyn,
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)),
	}
	// The controller manager's first visible work: the default ServiceAccount
	// of each namespace, which Pods need to be admitted.
	waitUntil(t, dir, time.Minute, "the controller manager's default ServiceAccount", func(ctx context.Context) error {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", getOptions)
		return err
	}, apiserver, kcm, scheduler)
	t.Logf("Kubernetes %s: the API server ready %s after its start, the controller manager at work %s after",
		v.GitVersion, apiReady.Round(time.Millisecond), time.Since(begun).Round(time.Millisecond))
	return cp
}

// proc is one running server of the control plane.
type proc struct {
	name string
	done chan struct{} // closed when it has exited
	err  error         // how it exited, once done is closed
}

// exited returns how p exited, or nil while it runs.
func (p *proc) exited() error {
	select {
	case <-p.done:
		if p.err == nil {
			return fmt.Errorf("%s exited", p.name)
		}
		return fmt.Errorf("%s exited: %w", p.name, p.err)
	default:
		return nil
	}
}

// start runs a server of the control plane, its output in dir/<name>.log, and
// stops it when the test ends: SIGTERM, then SIGKILL after 10 s.
func start(t *testing.T, dir, path string, args ...string) *proc {
	t.Helper()
	name := filepath.Base(path)
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	// Its own context: the Cleanup below stops it, SIGTERM first.
	cmd := exec.CommandContext(context.WithoutCancel(t.Context()), path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives a killed test binary
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		_ = logf.Close()
	})
	return p
}

// waitUntil calls ready every 100 ms until it returns nil, failing the test
// after limit with the last error and the tail of every server's log, or at
// once when one of watch has exited.
func waitUntil(t *testing.T, dir string, limit time.Duration, what string, ready func(context.Context) error, watch ...*proc) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := ready(ctx)
		cancel()
		if err == nil {
			return
		}
		for _, p := range watch {
			if perr := p.exited(); perr != nil {
				t.Fatalf("%s: %v\n%s", what, perr, logTails(dir))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v\n%s", what, limit, err, logTails(dir))
		}
		time.Sleep(100 * time.Millisecond) // polling the API server, within the bound above
	}
}

// logTails returns the last lines of each server's log in dir.
func logTails(dir string) string {
	var b strings.Builder
	for _, s := range servers {
		data, err := os.ReadFile(filepath.Join(dir, s+".log"))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "--- %s (last lines)\n%s\n", s, strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return b.String()
}

// pki holds the files of the control plane's certificates and keys: one CA
// for the API server's serving certificate and the administrator's client
// certificate, and the key that signs ServiceAccount tokens.
type pki struct {
	caCert, serverCert, serverKey, adminCert, adminKey, saKey string
}

func newPKI(t *testing.T, dir string) pki {
	t.Helper()
	p := pki{
		caCert:     filepath.Join(dir, "ca.crt"),
		serverCert: filepath.Join(dir, "apiserver.crt"),
		serverKey:  filepath.Join(dir, "apiserver.key"),
		adminCert:  filepath.Join(dir, "admin.crt"),
		adminKey:   filepath.Join(dir, "admin.key"),
		saKey:      filepath.Join(dir, "sa.key"),
	}
	now := time.Now()
	caKey := newKey(t)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stockguard-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.caCert, "CERTIFICATE", caDER)
	issue := func(certFile, keyFile string, tmpl *x509.Certificate) {
		key := newKey(t)
		tmpl.NotBefore, tmpl.NotAfter = ca.NotBefore, ca.NotAfter
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, certFile, "CERTIFICATE", der)
		writeKey(t, keyFile, key)
	}
	issue(p.serverCert, p.serverKey, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	// O=system:masters: the group RBAC lets do anything, as kubeadm's admin.
	issue(p.adminCert, p.adminKey, &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "stockguard-test", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	writeKey(t, p.saKey, newKey(t))
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writeKey(t *testing.T, path string, k *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "EC PRIVATE KEY", der)
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	writeFile(t, path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}))
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeKubeconfig writes the administrator's kubeconfig, which the test, the
// controller manager and the scheduler share.
func writeKubeconfig(t *testing.T, path, server string, p pki) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.caCert}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: p.adminCert, ClientKey: p.adminKey}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin"}
	cfg.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}

// warnings collects the API server's warnings (the Warning headers of its
// answers to one client): Pod Security's among them.
type warnings struct {
	mu   sync.Mutex
	list []string
}

// HandleWarningHeader implements rest.WarningHandler.
func (w *warnings) HandleWarningHeader(code int, _, text string) {
	if code != 299 || text == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.list)
}
