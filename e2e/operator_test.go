package e2e

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// Issue 34, items 2 and 5: `steward operator setup` and `steward operator
// debug` against a real agent with ACLs.

// setupPolicy is the controller's policy in these tests: a notify block
// whose URL carries a secret (as chat webhooks' do), which nothing
// `operator debug` writes may show.
const setupPolicy = twoTiers + `
notify "ops" {
  url    = "http://127.0.0.1:1/hooks/URLSECRET-8d1f0c"
  events = ["preempt"]
}
`

// TestOperatorSetupAndDebug: on an empty production-shaped cluster (ACLs
// with the management token only, mTLS, a client in the controller's node
// pool), `steward operator setup -check` finds
// everything missing; setup creates the namespace, the ACL policy bound
// to the job, the policy variable and the controller job; -check then
// passes; a second setup changes nothing; the controller job it created
// runs and leads. Then `steward operator debug` writes an archive with the
// controller's status, states and records (of a job in its node pool,
// which it holds), resolved policy, plan, snapshot, logs and profiles, in which no secret is left: not the token used, not
// the notify URL, not a job's own variable items, not the values of a
// secret environment variable or of a notify header's variable.
func TestOperatorSetupAndDebug(t *testing.T) {
	t.Parallel()
	mgmt := uuid(t)
	// A server and one client for the controller, in node pool steward,
	// with ACLs and mTLS, and nothing else: no namespace, no policy.
	pc := testnomad.StartCluster(t, testnomad.ClusterOptions{MgmtToken: mgmt, Server: testnomad.Options{LogLevel: "INFO"},
		Clients: []testnomad.ClientSpec{{Name: "steward-1", NodePool: "steward", Options: testnomad.Options{LogLevel: "INFO"}}}})
	c := &cluster{Agent: pc.Clients[0], t: t, prod: pc}
	if _, _, err := c.Client.Namespaces().Info("steward", nil); err == nil {
		t.Fatal("namespace steward exists before setup: not an empty cluster")
	}
	pol := writePolicy(t, setupPolicy)
	// The notify secrets, stored by -notify-env-file: names printed,
	// values never.
	const notifySecret = "NOTIFYSECRET-3b9e71"
	envFile := filepath.Join(t.TempDir(), "notify.env")
	if err := os.WriteFile(envFile, []byte("STEWARD_SETUP_HOOK_AUTH=\"Bearer "+notifySecret+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	steward := func(env []string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(testnomad.StewardBin(t), args...)
		cmd.Env = append(append(os.Environ(), c.nomadEnv(mgmt)...), env...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("steward %v: %v", args, err)
		}
		if strings.Contains(string(out), mgmt) {
			t.Fatalf("steward %v printed the management token:\n%s", args, out)
		}
		if strings.Contains(string(out), notifySecret) {
			t.Fatalf("steward %v printed a notify secret:\n%s", args, out)
		}
		return string(out), code
	}
	setupArgs := []string{"-policy", pol, "-notify-env-file", envFile, "-var", "driver=raw_exec", "-var", "steward_bin=" + testnomad.StewardBin(t),
		"-var", "user=nobody", "-var", "count=1", "-var", "pprof=true", "-var", "node_pool=steward"}

	t.Run("check finds everything missing", func(t *testing.T) {
		out, code := steward(nil, append([]string{"operator", "setup", "-check"}, setupArgs...)...)
		if code != 2 || !strings.Contains(out, "missing   namespace steward") || !strings.Contains(out, "missing   job steward-controller") {
			t.Fatalf("exit %d, want 2 with the namespace and the job missing:\n%s", code, out)
		}
	})
	t.Run("setup creates", func(t *testing.T) {
		out, code := steward(nil, append([]string{"operator", "setup"}, setupArgs...)...)
		t.Logf("setup:\n%s", out)
		for _, want := range []string{"created   namespace steward", "created   ACL policy steward-controller (bound to job steward-controller in namespace steward)",
			"created   policy variable nomad/jobs/steward-controller in namespace steward", "created   job steward-controller in namespace steward",
			"created   notify secrets variable nomad/jobs/steward-controller/controller/controller in namespace steward: STEWARD_SETUP_HOOK_AUTH from",
			"What is left", "monitoring/grafana/steward.json", "steward-alerts.yml"} {
			if !strings.Contains(out, want) {
				t.Errorf("setup output lacks %q", want)
			}
		}
		if code != 0 {
			t.Fatalf("setup exit %d", code)
		}
		p, _, err := c.Client.ACLPolicies().Info("steward-controller", nil)
		if err != nil || p.JobACL == nil || p.JobACL.JobID != "steward-controller" || p.JobACL.Namespace != "steward" ||
			p.Rules != shippedACL(t, "steward-controller.policy.hcl") {
			t.Fatalf("ACL policy: %+v, %v", p, err)
		}
	})
	t.Run("check passes", func(t *testing.T) {
		out, code := steward(nil, append([]string{"operator", "setup", "-check"}, setupArgs...)...)
		if code != 0 || !strings.Contains(out, "Everything steward operator setup makes is in place") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	t.Run("setup again changes nothing", func(t *testing.T) {
		before, _, err := c.Client.Jobs().Info("steward-controller", &api.QueryOptions{Namespace: "steward"})
		if err != nil {
			t.Fatal(err)
		}
		out, code := steward(nil, append([]string{"operator", "setup"}, setupArgs...)...)
		if code != 0 || !strings.Contains(out, "Nothing changed") || strings.Contains(out, "created") || strings.Contains(out, "updated") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		after, _, err := c.Client.Jobs().Info("steward-controller", &api.QueryOptions{Namespace: "steward"})
		if err != nil || *after.Version != *before.Version {
			t.Fatalf("the job changed: version %d → %d (%v)", *before.Version, *after.Version, err)
		}
	})
	t.Run("check without -policy validates the variable", func(t *testing.T) {
		out, code := steward(nil, "operator", "setup", "-check", "-var", "driver=raw_exec", "-var", "steward_bin="+testnomad.StewardBin(t),
			"-var", "user=nobody", "-var", "count=1", "-var", "pprof=true", "-var", "node_pool=steward")
		if code != 0 || !strings.Contains(out, "ok        policy variable nomad/jobs/steward-controller in namespace steward: kept (no -policy given)") ||
			!strings.Contains(out, "ok        notify secrets variable nomad/jobs/steward-controller/controller/controller in namespace steward: kept (no -notify-env-file given): STEWARD_SETUP_HOOK_AUTH") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	t.Run("check finds what differs and changes nothing", func(t *testing.T) {
		other := writePolicy(t, strings.Replace(setupPolicy, "priority    = 40", "priority    = 45", 1))
		args := []string{"operator", "setup", "-check", "-policy", other}
		args = append(args, setupArgs[4:]...)
		args = append(args, "-var", "pprof=false")
		out, code := steward(nil, args...)
		if code != 2 || !strings.Contains(out, "differs   policy variable") || !strings.Contains(out, "differs   job steward-controller") ||
			!strings.Contains(out, "2 of 7 steps missing or different") {
			t.Fatalf("exit %d, want 2 with the variable and the job differing:\n%s", code, out)
		}
		v, _, err := c.Client.Variables().Read("nomad/jobs/steward-controller", &api.QueryOptions{Namespace: "steward"})
		if err != nil || strings.Contains(v.Items["policy"], "= 45") {
			t.Fatalf("-check changed the policy variable (%v)", err)
		}
	})
	t.Run("the controller job leads", func(t *testing.T) {
		testnomad.WaitFor(t, 90*time.Second, "the controller job setup made leads and publishes its status", func() (bool, string) {
			l := c.controllerJobLogs()
			v, _, err := c.Client.Variables().Read("steward/status", &api.QueryOptions{Namespace: "steward"})
			return strings.Contains(l, "leading: this controller acts") && err == nil && v != nil, tail(l, 10) + c.controllerJobEvents()
		})
	})
	if t.Failed() {
		return
	}

	// Something for the controller to act on, so that it keeps a state
	// and writes a record: a job of namespace default in its node pool,
	// which it holds.
	if _, _, err := c.Client.Jobs().Register(sleepJob("intruder", api.JobTypeService, "steward", 1), &api.WriteOptions{Namespace: "default"}); err != nil {
		t.Fatal(err)
	}
	c.waitRecord(60*time.Second, "default", "intruder", "steward_state", "held")

	// Secrets planted where the archive reads: a job's record holding its
	// own item beside Steward's, and, in Steward's items (as a reason
	// could quote one), the values of a secret environment variable and of
	// a notify header's variable.
	const envSecret, hdrSecret, ownSecret = "ENVSECRET-51c2a9", "HDRSECRET-77ab31", "OWNSECRET-0e9d44"
	rec := &api.Variable{Namespace: "default", Path: "nomad/jobs/planted", Items: map[string]string{
		"steward_state": "running", "steward_reason": "quoted " + envSecret + " and " + hdrSecret, "api_key": ownSecret}}
	if _, _, err := c.Client.Variables().Update(rec, &api.WriteOptions{Namespace: "default"}); err != nil {
		t.Fatal(err)
	}
	hdrPolicy := writePolicy(t, setupPolicy+`
notify "team" {
  url              = "http://127.0.0.1:1/team"
  headers_from_env = { Authorization = "HOOK_CRED" }
}
`)
	// Every run must hide these; the notify header's value is known for a
	// secret only through a policy that names its variable (HOOK_CRED
	// does not say what it holds).
	secrets := []string{mgmt, "URLSECRET-8d1f0c", envSecret, ownSecret, notifySecret}
	env := []string{"STEWARD_E2E_TOKEN=" + envSecret, "HOOK_CRED=" + hdrSecret}
	for _, tc := range []struct {
		name    string
		args    []string
		want    []string
		secrets []string
	}{
		{"debug with the job's policy", nil, []string{"index.json", "versions.json", "status.json", "controller.json", "policy.json",
			"plan.json", "snapshot.json", "nomad/job.json", "nomad/allocations.json", "nomad/scheduler.json",
			"records/default/planted.json", "records/default/intruder.json", "states/default/intruder.json", "logs/steward-controller.controller_0_-*/controller.stderr",
			"controller/127.0.0.1_*/healthz.json", "controller/127.0.0.1_*/metrics.txt", "controller/127.0.0.1_*/goroutine.txt",
			"controller/127.0.0.1_*/heap.pprof", "controller/127.0.0.1_*/cpu.pprof"}, secrets},
		{"debug with a policy whose notify header comes from the environment", []string{"-policy", hdrPolicy},
			[]string{"index.json", "policy.json", "plan.json", "snapshot.json", "records/default/planted.json"}, append(secrets, hdrSecret)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "debug.tar.gz")
			start := time.Now()
			text, code := steward(env, append([]string{"operator", "debug", "-output", out, "-duration", "8s"}, tc.args...)...)
			took := time.Since(start)
			t.Logf("debug (%s):\n%s", took.Round(time.Millisecond), text)
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			if took > 20*time.Second {
				t.Errorf("debug took %s with -duration 8s", took)
			}
			fi, err := os.Stat(out)
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("archive: %v, %v", fi, err)
			}
			files := readTarGz(t, out)
			var names []string
			for n := range files {
				names = append(names, n)
			}
			sort.Strings(names)
			t.Logf("archive:\n%s", strings.Join(names, "\n"))
			for _, w := range tc.want {
				found := false
				for _, n := range names {
					if ok, _ := filepath.Match("steward-debug-*/"+w, n); ok {
						found = true
					}
				}
				if !found {
					t.Errorf("archive lacks %s; it has:\n%s\nindex.json:\n%s", w, strings.Join(names, "\n"), indexOf(files))
				}
			}
			for n, body := range files {
				for _, s := range tc.secrets {
					if strings.Contains(body, s) {
						t.Errorf("%s holds the planted secret %s", n, s)
					}
				}
			}
			for n, body := range files {
				if strings.HasSuffix(n, "/records/default/planted.json") && (!strings.Contains(body, "steward_state") || strings.Contains(body, "api_key")) {
					t.Errorf("the record in the archive is not its steward_* items alone:\n%s", body)
				}
				if strings.HasSuffix(n, "/policy.json") && (!strings.Contains(body, `"interactive"`) || strings.Contains(body, "127.0.0.1:1")) {
					t.Errorf("policy.json is not the policy less its notify blocks:\n%s", body)
				}
			}
		})
	}
}

func indexOf(files map[string]string) string {
	for n, b := range files {
		if strings.HasSuffix(n, "/index.json") {
			return b
		}
	}
	return "(none)"
}

// readTarGz reads every file of a tar.gz: name → content.
func readTarGz(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Mode != 0o600 {
			t.Errorf("%s: mode %o, want 600", h.Name, h.Mode)
		}
		out[h.Name] = string(b)
	}
}
