package testnomad

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/devagent"
	"github.com/gpu-steward/steward/internal/procs"
)

// jobsStopTimeout bounds the wait for stopped jobs' tasks to end: longer
// than a client's max_kill_timeout (30s), the longest a task may take.
const jobsStopTimeout = 45 * time.Second

// stopJobs stops every job in every namespace and waits, up to timeout,
// until the node runs no allocation and no task or executor is left under
// the data dir.
//
// A dev agent destroys the allocations it knows of when it shuts down, but
// not those the server has already forgotten: a job purged just before (as
// tests' clean-ups do) leaves its allocation to the client's garbage
// collector, which the agent does not wait for. The agent then exited
// within milliseconds, while the task was still being killed, and the
// task's `nomad executor`, in a session of its own, ran on with the task
// (#17: one from TestSimGPUsOnRealAgent was still running 45 minutes after
// `make test`). Stopping jobs first, and waiting for their processes, makes
// the shutdown find nothing left to do.
func (a *Agent) stopJobs(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	c := a.adminClient()
	if err := a.deregisterAll(c, time.Now().Add(10*time.Second)); err != nil {
		// Then nothing would end by waiting: the agent's shutdown destroys
		// the allocations it knows of, and Stop kills what is left.
		a.logf("nomad agent: stopping its jobs: %v", err)
		return
	}
	// The agent and its plugins (its process group) are stopped next.
	agentGroup := a.Pid()
	notAgent := func(p procs.Proc) bool { return p.Pgid == agentGroup }
	var status string
	var left []procs.Proc
	for !a.Exited() {
		status = ""
		live, problem := a.liveAllocs(c)
		switch {
		case problem != "":
			status = problem
		case len(live) > 0:
			status = "allocations still running: " + strings.Join(live, ", ")
		}
		left, _ = devagent.Under(a.DataDir, notAgent)
		if (status == "" && len(left) == 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(left) > 0 || status != "" {
		a.logf("nomad agent: after stopping every job and waiting up to %v, %s; %d processes still running (killed after the agent stops):%s",
			timeout, status, len(left), procList(left))
	}
}

// deregisterAll stops every job in every namespace (not purging them:
// the server keeps their allocations, and the node's view of them, until
// they end), retrying until the deadline.
func (a *Agent) deregisterAll(c *api.Client, deadline time.Time) error {
	for {
		err := a.tryDeregisterAll(c)
		if err == nil || time.Now().After(deadline) || a.Exited() {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (a *Agent) tryDeregisterAll(c *api.Client) error {
	jobs, _, err := c.Jobs().List(&api.QueryOptions{Namespace: api.AllNamespacesNamespace})
	if err != nil {
		return fmt.Errorf("listing jobs: %w", err)
	}
	for _, j := range jobs {
		if j.Stop {
			continue
		}
		if _, _, err := c.Jobs().Deregister(j.ID, false, &api.WriteOptions{Namespace: j.Namespace}); err != nil {
			return fmt.Errorf("stopping job %s/%s: %w", j.Namespace, j.ID, err)
		}
	}
	return nil
}

// liveAllocs lists the node's allocations that are not terminal yet, or
// says why it cannot.
func (a *Agent) liveAllocs(c *api.Client) ([]string, string) {
	allocs, _, err := c.Nodes().Allocations(a.NodeID, nil)
	if err != nil {
		return nil, fmt.Sprintf("listing the node's allocations: %v", err)
	}
	var live []string
	for _, al := range allocs {
		if al.ClientStatus == api.AllocClientStatusPending || al.ClientStatus == api.AllocClientStatusRunning {
			live = append(live, fmt.Sprintf("%s/%s %s (%s)", al.Namespace, al.JobID, al.ID[:8], al.ClientStatus))
		}
	}
	return live, ""
}

// adminClient is a client with the agent's management token (when ACLs
// are on), whatever token the test gave Agent.Client since.
func (a *Agent) adminClient() *api.Client {
	token := ""
	if a.aclDone {
		token = a.aclToken
	}
	cfg := a.APIConfig(token)
	// A wedged agent must not hang the test's clean-up.
	hc := cleanhttp.DefaultPooledClient()
	hc.Timeout = 10 * time.Second
	hc.Transport.(*http.Transport).TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if err := api.ConfigureTLS(hc, cfg.TLSConfig); err != nil {
		return a.Client
	}
	cfg.HttpClient = hc
	c, err := api.NewClient(cfg)
	if err != nil {
		return a.Client
	}
	return c
}

// procList formats processes one a line, for a log.
func procList(ps []procs.Proc) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "\n    pid %d (cwd %s): %s", p.Pid, p.Cwd, p.CommandLine())
	}
	return b.String()
}
