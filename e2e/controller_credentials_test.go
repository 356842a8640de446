package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// Issue 29, item 3: no credential leaves its owner.

// controllerAllocs lists every allocation of the controller job, whatever
// its status: one whose task exits at once spends most of its time
// pending a restart.
func (c *cluster) controllerAllocs() []string {
	allocs, _, err := c.Client.Jobs().Allocations("steward-controller", true, &api.QueryOptions{Namespace: "steward"})
	if err != nil {
		c.t.Fatalf("allocations of the controller job: %v", err)
	}
	var ids []string
	for _, a := range allocs {
		ids = append(ids, a.ID)
	}
	return ids
}

// controllerJobLogs reads the stderr of every allocation of the
// controller job (the operator's view: management token).
func (c *cluster) controllerJobLogs() string {
	var all []string
	for _, id := range c.controllerAllocs() {
		a, _, err := c.Client.Allocations().Info(id, &api.QueryOptions{Namespace: "steward"})
		if err != nil {
			continue
		}
		b, err := c.Client.AllocFS().Cat(a, "alloc/logs/controller.stderr.0", nil)
		if err != nil {
			continue
		}
		all = append(all, readAll(b))
	}
	return strings.Join(all, "\n")
}

// controllerJobEvents are the controller job's task events, for a
// failure's message.
func (c *cluster) controllerJobEvents() string {
	var b strings.Builder
	for _, id := range c.controllerAllocs() {
		a, _, err := c.Client.Allocations().Info(id, &api.QueryOptions{Namespace: "steward"})
		if err != nil {
			continue
		}
		for _, ts := range a.TaskStates {
			for _, e := range ts.Events {
				fmt.Fprintf(&b, "\n%s %s: %s", id[:8], e.Type, e.DisplayMessage)
			}
		}
	}
	return b.String()
}

// TestControllerJobTokenReadableByItAlone: the shipped controller job run
// without a `user` (as it shipped before) gets its workload identity
// written world-readable by Nomad, and the controller refuses to run with
// it, naming the file and its mode; run as a user of its own (here
// nobody), Nomad writes it 0600, the controller leads, and what tenants
// may read names the leader without the controller's allocation ID.
func TestControllerJobTokenReadableByItAlone(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 2}}, controllerNodes: 1}, "ml")
	if _, err := c.Client.ACLPolicies().Upsert(&api.ACLPolicy{Name: "steward-controller",
		Rules:  shippedACL(t, "steward-controller.policy.hcl"),
		JobACL: &api.JobACL{Namespace: "steward", JobID: "steward-controller"}}, nil); err != nil {
		t.Fatalf("bind the controller policy to the job: %v", err)
	}
	v := &api.Variable{Namespace: "steward", Path: "nomad/jobs/steward-controller",
		Items: map[string]string{"policy": fmt.Sprintf(faultPolicy, "0s")}}
	if _, _, err := c.Client.Variables().Update(v, &api.WriteOptions{Namespace: "steward"}); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(testnomad.RepoRoot(t), "jobs", "steward-controller.nomad.hcl")
	run := func(user string) {
		// On the controller's own node pool, through the task API socket
		// (the jobspec's default: no address, no certificates in the task).
		c.RegisterJobFile(t, spec, map[string]string{"driver": "raw_exec", "steward_bin": testnomad.StewardBin(t),
			"count": "1", "user": user, "node_pool": "steward"})
	}

	run("")
	modeRE := regexp.MustCompile(`token file \S+/secrets/nomad_token has mode 06[46][46]: its group or other users may read or change it[^\n]*`)
	testnomad.WaitFor(t, 90*time.Second, "the controller refuses the world-readable token file", func() (bool, string) {
		l := c.controllerJobLogs()
		return modeRE.MatchString(l), tail(l, 10) + c.controllerJobEvents()
	})
	t.Logf("refused: %s", modeRE.FindString(c.controllerJobLogs()))
	if l := c.controllerJobLogs(); strings.Contains(l, "leading: this controller acts") {
		t.Fatalf("the controller led with a token file others may read:\n%s", tail(l, 20))
	}

	run("nobody")
	testnomad.WaitFor(t, 90*time.Second, "run as its own user, the controller leads", func() (bool, string) {
		var running []string
		allocs, _, _ := c.Client.Jobs().Allocations("steward-controller", false, &api.QueryOptions{Namespace: "steward"})
		for _, a := range allocs {
			if a.ClientStatus == "running" && a.JobVersion > 0 {
				running = append(running, a.ID)
			}
		}
		l := c.controllerJobLogs()
		return len(running) == 1 && strings.Contains(l, "leading: this controller acts"), tail(l, 10)
	})
	c.work("train", "ml", "training", 1, 1, "priority", "50")
	c.waitRecord(60*time.Second, "ml", "train", "steward_tier", "training")

	tenant := c.as(c.aclToken("team-ml", fmt.Sprintf(tenantRules, "ml"), userACL(t, "ml")))
	var published string
	testnomad.WaitFor(t, 60*time.Second, "the leader published where it answers checks", func() (bool, string) {
		cv, _, err := tenant.Variables().Read("steward/controller", &api.QueryOptions{Namespace: "steward"})
		if err != nil || cv == nil {
			return false, fmt.Sprint(err)
		}
		published = fmt.Sprint(cv.Items)
		return cv.Items["leader"] != "", published
	})
	testnomad.WaitFor(t, 60*time.Second, "the leader published ml's view", func() (bool, string) {
		view, _, err := tenant.Variables().Read("steward/status", &api.QueryOptions{Namespace: "ml"})
		if err != nil || view == nil {
			return false, fmt.Sprint(err)
		}
		published += " " + view.Items["status"]
		return true, ""
	})
	allocs, _, err := c.Client.Jobs().Allocations("steward-controller", true, &api.QueryOptions{Namespace: "steward"})
	if err != nil || len(allocs) == 0 {
		t.Fatalf("the controller's allocations: %v", err)
	}
	for _, a := range allocs {
		if strings.Contains(published, a.ID) || strings.Contains(published, a.ID[:8]) {
			t.Errorf("what tenants read names the controller's allocation %s: %s", a.ID, published)
		}
	}
	t.Logf("tenants read: %s", published)
	if !strings.Contains(published, "steward-controller.controller[0]") {
		t.Errorf("the leader is not named by its allocation's name: %s", published)
	}
	if strings.Contains(published, "/secrets/") || strings.Contains(published, "/alloc/") {
		t.Errorf("what tenants read names a host path of the controller: %s", published)
	}
}

// tlsCerts makes a CA and a server certificate (SANs localhost and
// 127.0.0.1) with nomad's own tls commands, as an operator would; it
// returns the CA, certificate and key files.
func tlsCerts(t *testing.T) (ca, cert, key string) {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{{"tls", "ca", "create"}, {"tls", "cert", "create", "-server"}} {
		cmd := exec.Command(testnomad.NomadBin(t), args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nomad %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return filepath.Join(dir, "nomad-agent-ca.pem"), filepath.Join(dir, "global-server-nomad.pem"),
		filepath.Join(dir, "global-server-nomad-key.pem")
}

// jobCheck runs `steward job check` on jobs/gpu-work.nomad.hcl with a
// token, extra environment and arguments; it returns the output and exit
// code.
func (c *cluster) jobCheck(token string, env []string, args ...string) (string, int) {
	c.t.Helper()
	spec := filepath.Join(testnomad.RepoRoot(c.t), "jobs", "gpu-work.nomad.hcl")
	cmd := exec.Command(testnomad.StewardBin(c.t), append(append([]string{"job", "check"}, args...), spec)...)
	cmd.Env = append(append(os.Environ(), c.nomadEnv(token)...), env...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("steward job check: %v", err)
	}
	return string(out), 0
}

// TestJobCheckOverTLS: a controller refuses to serve checks off loopback
// without TLS; with the operator's certificate it serves them over TLS
// and publishes an https address, which `steward job check` finds and
// verifies with -controller-ca; without the CA the check is refused
// before the token is sent; and the CLI refuses to send a token in
// cleartext to an address off loopback.
func TestJobCheckOverTLS(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 2}}}, "ml")
	c.controllerToken = prodMgmtToken
	mlToken := c.aclToken("team-ml", fmt.Sprintf(tenantRules, "ml"))
	policy := writePolicy(t, jobCheckPolicy)

	// Refused before it listens: nothing binds off loopback.
	bare := c.startController("bare", policy, "-check-listen", "0.0.0.0:0")
	testnomad.WaitFor(t, 30*time.Second, "a cleartext check listener off loopback is refused", func() (bool, string) {
		return bare.Exited() && bare.Contains("-check-listen 0.0.0.0:0 serves /v1/job/check off loopback without TLS"), tail(bare.Log(), 5)
	})

	ca, cert, key := tlsCerts(t)
	ctl := c.startController("ctl", policy, "-check-listen", "127.0.0.1:0", "-tls-cert", cert, "-tls-key", key)
	var published string
	testnomad.WaitFor(t, 60*time.Second, "the leader publishes an https check address", func() (bool, string) {
		cv, _, err := c.as(mlToken).Variables().Read("steward/controller", &api.QueryOptions{Namespace: "steward"})
		if err != nil || cv == nil {
			return false, fmt.Sprint(err) + tail(ctl.Log(), 5)
		}
		published = cv.Items["check_address"]
		return strings.HasPrefix(published, "https://127.0.0.1:"), published
	})

	vars := []string{"-namespace", "ml", "-var", "name=nb", "-var", "namespace=ml", "-var", "tier=interactive", "-var", "gpus=1"}
	cases := []struct {
		name     string
		env      []string
		args     []string
		wantCode int
		want     string
	}{
		{name: "over TLS with the controller's CA", env: []string{"STEWARD_CONTROLLER_CACERT=" + ca}, want: "work   1       1          run"},
		{name: "with -controller-ca", args: []string{"-controller-ca", ca}, want: "Tier              = interactive"},
		{name: "a certificate it cannot verify is refused", wantCode: 255, want: "certificate"},
		{name: "cleartext off loopback refused", args: []string{"-controller", "http://192.0.2.10:9646"}, wantCode: 255,
			want: "refusing to send your Nomad token in cleartext to http://192.0.2.10:9646"},
	}
	for _, tc := range cases {
		out, code := c.jobCheck(mlToken, tc.env, append(tc.args, vars...)...)
		if code != tc.wantCode || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d, want %d with %q:\n%s", tc.name, code, tc.wantCode, tc.want, out)
		}
	}
	if strings.Contains(ctl.Log(), mlToken) {
		t.Error("the tenant's token appears in the controller's log")
	}
}

// TestJobCheckFloodOthersStillServed: one tenant floods the controller
// with checks (many at once, from one token, and oversized bodies); it
// gets 429 and 413 with the numbers, another tenant's check is answered
// during the flood, and enforcement goes on: a job submitted during the
// flood gets its tier's priority.
func TestJobCheckFloodOthersStillServed(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 2}}}, "ml", "rnd")
	c.controllerToken = prodMgmtToken
	mlToken := c.aclToken("team-ml", fmt.Sprintf(tenantRules, "ml"))
	rndToken := c.aclToken("team-rnd", fmt.Sprintf(tenantRules, "rnd"))
	ctl := c.startController("ctl", writePolicy(t, jobCheckPolicy), "-listen", "127.0.0.1:0",
		"-check-concurrency", "2", "-check-rate", "1", "-check-burst", "2")
	var addr string
	testnomad.WaitFor(t, 60*time.Second, "the controller serving checks", func() (bool, string) {
		m := checkAddrRE.FindStringSubmatch(ctl.Log())
		if m != nil {
			addr = "http://" + m[1]
		}
		return m != nil && ctl.Contains("leading: this controller acts"), tail(ctl.Log(), 5)
	})
	// A small valid job, as the CLI sends it.
	job, err := c.Client.Jobs().ParseHCLOpts(&api.JobsParseRequest{Canonicalize: true,
		JobHCL: mustRead(t, filepath.Join(testnomad.RepoRoot(t), "jobs", "gpu-work.nomad.hcl")),
		Variables: `name = "flood"
namespace = "ml"
tier = "interactive"
gpus = 1
`})
	if err != nil {
		t.Fatal(err)
	}
	payload := mustJSON(t, map[string]any{"Job": job})
	huge := mustJSON(t, map[string]any{"Job": map[string]any{"ID": strings.Repeat("x", 2<<20)}})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	var sample429, sample413 string
	hc := &http.Client{Timeout: 30 * time.Second}
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(25 * time.Millisecond): // ~600 a second in all, on a small shared machine
				}
				b := payload
				if i%4 == 0 {
					b = huge
				}
				req, _ := http.NewRequest(http.MethodPost, addr+"/v1/job/check", bytes.NewReader(b))
				req.Header.Set("X-Nomad-Token", mlToken)
				resp, err := hc.Do(req)
				if err != nil {
					continue
				}
				buf := new(bytes.Buffer)
				_, _ = buf.ReadFrom(resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				switch resp.StatusCode {
				case http.StatusTooManyRequests:
					sample429 = buf.String() + " Retry-After=" + resp.Header.Get("Retry-After")
				case http.StatusRequestEntityTooLarge:
					sample413 = buf.String()
				}
				mu.Unlock()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	started := time.Now()

	time.Sleep(2 * time.Second)
	c.work("during", "ml", "training", 1, 1, "priority", "55")
	for i := range 3 {
		// Within rnd's own rate (1 a second, bursts of 2).
		time.Sleep(time.Second)
		out, code := c.jobCheck(rndToken, nil, "-controller", addr, "-namespace", "rnd",
			"-var", "name=nb", "-var", "namespace=rnd", "-var", "tier=interactive", "-var", "gpus=1")
		if code != 0 || !strings.Contains(out, "Tenant            = rnd") {
			t.Errorf("another tenant's check %d during the flood: exit %d:\n%s", i, code, out)
		}
	}
	c.waitRecord(60*time.Second, "ml", "during", "steward_tier", "training")
	testnomad.WaitFor(t, 60*time.Second, "enforcement goes on during the flood: the job gets its tier's priority", func() (bool, string) {
		j, _, err := c.Client.Jobs().Info("during", &api.QueryOptions{Namespace: "ml"})
		return err == nil && *j.Priority == 40, fmt.Sprint(err)
	})
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	elapsed := time.Since(started)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("flood answers: %v", codes)
	if codes[http.StatusTooManyRequests] == 0 || !strings.Contains(sample429, "1 a second, bursts of 2") || !strings.Contains(sample429, "Retry-After=") {
		t.Errorf("the flooding token was not rate-limited: %v %s", codes, sample429)
	}
	if codes[http.StatusRequestEntityTooLarge] == 0 || !strings.Contains(sample413, "1048576") {
		t.Errorf("oversized bodies were not refused with the limit: %v %s", codes, sample413)
	}
	if n := codes[http.StatusOK]; n > 3+int(elapsed.Seconds()) {
		t.Errorf("%d of the flood's checks were answered in %s: more than 1 a second with bursts of 2", n, elapsed.Round(time.Second))
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
