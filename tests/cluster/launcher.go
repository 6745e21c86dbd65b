package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// state is what `up` leaves in the state folder for `down` and for a later `up`.
type state struct {
	APIServer string         `json:"apiServer"`
	Token     string         `json:"token"`
	PIDs      map[string]int `json:"pids"`
}

// Start order matters: each component needs the previous ones.
var order = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

func init() {
	components["up"] = up
	components["down"] = down
}

func stateDir(args []string) string {
	if len(args) > 0 && args[0] != "" {
		return args[0]
	}
	if d := os.Getenv("CLUSTER_STATE"); d != "" {
		return d
	}
	return filepath.Join("target", "cluster")
}

func logf(format string, a ...any) { fmt.Fprintf(os.Stderr, "cluster: "+format+"\n", a...) }

// up starts the control plane, or reuses a healthy one already running from dir.
func up(args []string) int {
	dir, _ := filepath.Abs(stateDir(args))
	stateDirForClient = dir
	if st, err := readState(dir); err == nil {
		if allAlive(st) && readyz(st) == nil {
			logf("reusing the healthy cluster in %s", dir)
			printExport(dir)
			return 0
		}
		logf("stale state in %s (dead or unhealthy components): starting clean", dir)
		stopAll(st)
	}
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		logf("%v", err)
		return 1
	}
	started := time.Now()
	st, err := start(dir)
	if err != nil {
		logf("start failed: %v", err)
		if st != nil {
			stopAll(st)
		}
		return 1
	}
	logf("ready in %.1fs", time.Since(started).Seconds())
	printExport(dir)
	return 0
}

func down(args []string) int {
	dir, _ := filepath.Abs(stateDir(args))
	st, err := readState(dir)
	if err == nil {
		stopAll(st)
	}
	if err := os.RemoveAll(dir); err != nil {
		logf("%v", err)
		return 1
	}
	logf("stopped and removed %s", dir)
	return 0
}

func printExport(dir string) {
	fmt.Printf("export KUBECONFIG=%s\n", filepath.Join(dir, "kubeconfig"))
}

func readState(dir string) (*state, error) {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, err
	}
	var st state
	return &st, json.Unmarshal(b, &st)
}

func (st *state) save(dir string) error {
	b, _ := json.MarshalIndent(st, "", "  ")
	return os.WriteFile(filepath.Join(dir, "state.json"), b, 0o600)
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	// A zombie or a recycled PID of another program is not ours.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b))
	return len(fields) > 2 && fields[2] != "Z"
}

func allAlive(st *state) bool {
	for _, name := range order {
		if !alive(st.PIDs[name]) {
			return false
		}
	}
	return true
}

// stopAll stops exactly the processes recorded in st: SIGTERM to all, then SIGKILL to
// any still running after a grace period, and waits until none is left running.
func stopAll(st *state) {
	for i := len(order) - 1; i >= 0; i-- {
		if pid := st.PIDs[order[i]]; alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
	}
	waitGone(st, 10*time.Second)
	for _, name := range order {
		if pid := st.PIDs[name]; alive(pid) {
			logf("%s (pid %d) ignored SIGTERM; killing it", name, pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	waitGone(st, 10*time.Second)
}

func waitGone(st *state, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		running := false
		for _, name := range order {
			running = running || alive(st.PIDs[name])
		}
		if !running {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freePort asks the kernel for a free loopback port; a port already taken is never chosen.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func start(dir string) (*state, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := writePKI(dir); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	tokenBytes := make([]byte, 16)
	_, _ = rand.Read(tokenBytes)
	token := hex.EncodeToString(tokenBytes)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(token+",admin,admin,system:masters\n"), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "audit-policy.yaml"), []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}
	if err := writeAdmissionConfig(dir); err != nil {
		return nil, err
	}
	ports := map[string]int{}
	for _, p := range []string{"etcd", "etcd-peer", "apiserver", "kcm", "scheduler", "kwok"} {
		if ports[p], err = freePort(); err != nil {
			return nil, err
		}
	}
	st := &state{APIServer: fmt.Sprintf("https://127.0.0.1:%d", ports["apiserver"]), Token: token, PIDs: map[string]int{}}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(kubeconfigTmpl, filepath.Join(dir, "ca.crt"), st.APIServer, token)), 0o600); err != nil {
		return nil, err
	}
	var stages bytes.Buffer
	cmd := exec.Command(self, "kwok-stages")
	cmd.Stdout = &stages
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kwok stages: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kwok.yaml"), stages.Bytes(), 0o600); err != nil {
		return nil, err
	}

	p := func(name string) string { return filepath.Join(dir, name) }
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports["etcd"])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports["etcd-peer"])
	args := map[string][]string{
		"etcd": {
			"--name=default", "--data-dir=" + p("etcd"),
			"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
			"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=default=" + peerURL, "--listen-metrics-urls=",
			"--unsafe-no-fsync=true", "--log-level=warn",
		},
		"kube-apiserver": {
			"--etcd-servers=" + etcdURL,
			"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", ports["apiserver"]),
			"--tls-cert-file=" + p("apiserver.crt"), "--tls-private-key-file=" + p("apiserver.key"),
			"--client-ca-file=" + p("ca.crt"), "--token-auth-file=" + p("tokens.csv"),
			"--service-account-key-file=" + p("sa.pub"), "--service-account-signing-key-file=" + p("sa.key"),
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=RBAC",
			"--allow-privileged=true", "--cert-dir=" + p("apiserver-certs"),
			"--audit-policy-file=" + p("audit-policy.yaml"), "--audit-log-path=" + p("audit.log"),
			"--audit-log-maxsize=100", "--endpoint-reconciler-type=none",
			"--admission-control-config-file=" + p("admission.yaml"),
		},
		"kube-controller-manager": {
			"--kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
			"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", ports["kcm"]),
			"--service-account-private-key-file=" + p("sa.key"), "--root-ca-file=" + p("ca.crt"),
			"--cluster-signing-cert-file=" + p("ca.crt"), "--cluster-signing-key-file=" + p("ca.key"),
			"--leader-elect=false", "--node-monitor-grace-period=2m", "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller",
			"--concurrent-gc-syncs=5",
		},
		"kube-scheduler": {
			"--kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
			"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", ports["scheduler"]), "--leader-elect=false",
		},
		"kwok": {
			"--kubeconfig=" + kubeconfig, "--config=" + p("kwok.yaml"),
			"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
			"--node-ip=127.0.0.1", "--node-port=0", "--node-lease-duration-seconds=40",
			fmt.Sprintf("--server-address=127.0.0.1:%d", ports["kwok"]),
		},
	}
	waits := map[string]func() error{
		"etcd":           func() error { return httpOK(etcdURL+"/health", "", nil) },
		"kube-apiserver": func() error { return readyz(st) },
	}
	for _, name := range order {
		pid, err := spawn(self, name, args[name], p(name+".log"))
		if err != nil {
			return st, err
		}
		st.PIDs[name] = pid
		if err := st.save(dir); err != nil {
			return st, err
		}
		if w := waits[name]; w != nil {
			if err := waitFor(name, pid, p(name+".log"), 60*time.Second, w); err != nil {
				return st, err
			}
		}
	}
	steps := []struct {
		name string
		f    func() error
	}{
		{"kwok node", func() error { return api(st, "POST", "/api/v1/nodes", nodeJSON, 201, 409) }},
		{"default ServiceAccount", func() error { return api(st, "GET", "/api/v1/namespaces/default/serviceaccounts/default", "", 200) }},
		{"Ready node", func() error { return nodeReady(st) }},
	}
	for _, s := range steps {
		if err := waitAll(st, dir, s.name, 90*time.Second, s.f); err != nil {
			return st, err
		}
	}
	return st, nil
}

func spawn(self, name string, args []string, logPath string) (int, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return 0, err
	}
	defer logFile.Close()
	cmd := exec.Command(self, append([]string{name}, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own session: the component outlives this launcher and ignores its terminal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = cmd.Wait() }()
	return cmd.Process.Pid, nil
}

// waitFor polls check until it passes, failing early (with the log's tail) if the
// component exits.
func waitFor(name string, pid int, logPath string, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return fmt.Errorf("%s exited during start; last lines of %s:\n%s", name, logPath, tail(logPath, 30))
		}
		if last = check(); last == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s: %v; last lines of %s:\n%s", name, timeout, last, logPath, tail(logPath, 30))
}

// waitAll polls check while watching every component.
func waitAll(st *state, dir, what string, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		for _, name := range order {
			if !alive(st.PIDs[name]) {
				lp := filepath.Join(dir, name+".log")
				return fmt.Errorf("%s exited while waiting for %s; last lines of %s:\n%s", name, what, lp, tail(lp, 30))
			}
		}
		if last = check(); last == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("timed out waiting for %s: %v", what, last)
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

func httpClient(st *state) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{}}
	if st != nil {
		if ca, err := os.ReadFile(filepath.Join(filepath.Dir(st.kubeconfigPath()), "ca.crt")); err == nil {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(ca)
			tr.TLSClientConfig.RootCAs = pool
		}
	}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

var stateDirForClient string

func (st *state) kubeconfigPath() string { return filepath.Join(stateDirForClient, "kubeconfig") }

func httpOK(url, token string, st *state) error {
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient(st).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

func readyz(st *state) error { return httpOK(st.APIServer+"/readyz", st.Token, st) }

func api(st *state, method, path, body string, okCodes ...int) error {
	req, _ := http.NewRequest(method, st.APIServer+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+st.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient(st).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, c := range okCodes {
		if resp.StatusCode == c {
			return nil
		}
	}
	return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
}

func nodeReady(st *state) error {
	req, _ := http.NewRequest("GET", st.APIServer+"/api/v1/nodes/kwok-node-0", nil)
	req.Header.Set("Authorization", "Bearer "+st.Token)
	resp, err := httpClient(st).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var node struct {
		Status struct {
			Conditions []struct{ Type, Status string } `json:"conditions"`
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&node); err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == "Ready" && c.Status == "True" {
			return nil
		}
	}
	return errors.New("node kwok-node-0 not Ready yet")
}

// The fake node's capacity. Why 2000 Pods: the convergence benchmark creates 1,000
// Memcacheds, each with a Pod, beside whatever else the tests and the demo run.
const nodeJSON = `{"apiVersion":"v1","kind":"Node","metadata":{"name":"kwok-node-0",
 "annotations":{"node.alpha.kubernetes.io/ttl":"0","kwok.x-k8s.io/node":"fake"},
 "labels":{"kubernetes.io/hostname":"kwok-node-0","kubernetes.io/os":"linux","kubernetes.io/arch":"amd64","type":"kwok"}},
 "status":{"allocatable":{"cpu":"64","memory":"256Gi","pods":"2000"},"capacity":{"cpu":"64","memory":"256Gi","pods":"2000"}}}`

const kubeconfigTmpl = `apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    certificate-authority: %s
    server: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
`

// Request metadata for everything but reads of leases and events (noise); enough to
// prove which resources a client asked for.
// writeAdmissionConfig makes the apiserver present webhook-client.crt (signed by the
// cluster CA) to every admission webhook, as a cluster admin does for webhooks that
// authenticate their clients (Kubernetes: "Authenticate apiservers").
func writeAdmissionConfig(dir string) error {
	kubeconfig := filepath.Join(dir, "webhook-client.kubeconfig")
	users := fmt.Sprintf("apiVersion: v1\nkind: Config\nusers:\n- name: \"*\"\n  user:\n    client-certificate: %s\n    client-key: %s\n",
		filepath.Join(dir, "webhook-client.crt"), filepath.Join(dir, "webhook-client.key"))
	if err := os.WriteFile(kubeconfig, []byte(users), 0o600); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n")
	for _, name := range []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"} {
		fmt.Fprintf(&b, "- name: %s\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: %s\n", name, kubeconfig)
	}
	return os.WriteFile(filepath.Join(dir, "admission.yaml"), []byte(b.String()), 0o600)
}

const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  resources: [{group: "coordination.k8s.io", resources: ["leases"]}]
- level: Metadata
`
