package command

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/nomad/api"
)

// What `steward operator debug` reads of the controller job through Nomad
// (the job, its allocations, their logs) and of each controller copy over
// HTTP (/healthz, /metrics, /debug/pprof).

// controllerJob adds the controller job (its task environment left out),
// its allocations, the tail of their logs, and Nomad's scheduler
// configuration.
func (r *debugRun) controllerJob() {
	if sc, _, err := r.client.Operator().SchedulerGetConfiguration(r.q()); err != nil {
		r.arc.problem("nomad/scheduler.json: %v", err)
	} else {
		r.arc.addJSON("nomad/scheduler.json", sc.SchedulerConfig)
	}
	job, _, err := r.client.Jobs().Info(setupJobID, r.q())
	if err != nil {
		r.arc.problem("nomad/job.json: the controller job %s@%s: %v", setupJobID, r.ns, err)
		return
	}
	for _, tg := range job.TaskGroups {
		for _, t := range tg.Tasks {
			// The environment may carry the notify secrets the policy's
			// *_env settings name: their values are also redacted
			// wherever else they appear (a log line).
			for k, v := range t.Env {
				r.red.secret(v, "controller task env "+k)
				t.Env[k] = redacted
			}
		}
	}
	r.arc.addJSON("nomad/job.json", job)
	allocs, _, err := r.client.Jobs().Allocations(setupJobID, true, r.q())
	if err != nil {
		r.arc.problem("nomad/allocations.json: %v", err)
		return
	}
	r.arc.addJSON("nomad/allocations.json", allocs)
	sort.Slice(allocs, func(i, j int) bool { return allocs[i].ModifyTime > allocs[j].ModifyTime })
	for i, stub := range allocs {
		if i == 6 { // the newest few: older copies' logs are rotated out anyway
			r.arc.problem("logs: %d older allocations left out", len(allocs)-i)
			break
		}
		r.allocLogs(stub)
		if r.ctx.Err() != nil {
			r.arc.problem("logs: -duration reached")
			return
		}
	}
}

// allocLogs adds the tail of the newest stdout and stderr file of each of
// the allocation's tasks.
func (r *debugRun) allocLogs(stub *api.AllocationListStub) {
	alloc, _, err := r.client.Allocations().Info(stub.ID, r.q())
	if err != nil {
		r.arc.problem("logs of allocation %s: %v", shortID(stub.ID), err)
		return
	}
	files, _, err := r.client.AllocFS().List(alloc, "alloc/logs", r.q())
	if err != nil {
		r.arc.problem("logs of allocation %s (%s): %v", shortID(stub.ID), stub.ClientStatus, err)
		return
	}
	// Nomad names them <task>.<stdout|stderr>.<n>; the highest n is the
	// newest.
	newest := map[string]*api.AllocFileInfo{}
	index := map[string]int{}
	for _, f := range files {
		i := strings.LastIndexByte(f.Name, '.')
		if f.IsDir || i < 0 {
			continue
		}
		var n int
		if _, err := fmt.Sscanf(f.Name[i+1:], "%d", &n); err != nil {
			continue
		}
		base := f.Name[:i]
		if cur, ok := newest[base]; !ok || n > index[base] || cur == nil {
			newest[base], index[base] = f, n
		}
	}
	for base, f := range newest {
		off := int64(0)
		if f.Size > debugLogBytes {
			off = f.Size - debugLogBytes
		}
		rc, err := r.client.AllocFS().ReadAt(alloc, "alloc/logs/"+f.Name, off, f.Size-off, r.q())
		if err != nil {
			r.arc.problem("logs/%s: %v", f.Name, err)
			continue
		}
		b, err := io.ReadAll(io.LimitReader(rc, debugLogBytes))
		rc.Close()
		if err != nil {
			r.arc.problem("logs/%s: %v", f.Name, err)
			continue
		}
		r.arc.add(fmt.Sprintf("logs/%s-%s/%s", alloc.Name, shortID(alloc.ID), base), b)
	}
}

// controllers adds each controller copy's HTTP endpoints: the addresses
// given, else the steward-controller service's registrations.
func (r *debugRun) controllers(addrs []string) {
	if len(addrs) == 0 {
		regs, _, err := r.client.Services().Get(setupJobID, r.q())
		if err != nil {
			r.arc.problem("controller endpoints: the %s service: %v (give -controller URL)", setupJobID, err)
			return
		}
		for _, s := range regs {
			addrs = append(addrs, fmt.Sprintf("http://%s:%d", s.Address, s.Port))
		}
		if len(addrs) == 0 {
			r.arc.problem("controller endpoints: no %s service registered (a controller in a container serves no one outside it; give -controller URL to reach one)", setupJobID)
			return
		}
	}
	// The CPU profile takes a third of what -duration leaves, at least
	// a second, shared among the copies.
	left := time.Until(deadlineOf(r.ctx))
	cpu := max(time.Second, left/3/time.Duration(len(addrs)))
	hc := cleanhttp.DefaultClient()
	for _, a := range addrs {
		u, err := url.Parse(strings.TrimRight(a, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			r.arc.problem("controller %q: not an http(s) URL", a)
			continue
		}
		dir := "controller/" + u.Host
		get := func(path, file string) bool {
			b, code, err := httpGet(r.ctx, hc, u.String()+path)
			switch {
			case err != nil:
				r.arc.problem("%s/%s: %v", dir, file, err)
				return false
			case code == http.StatusNotFound && strings.HasPrefix(path, "/debug/pprof"):
				r.arc.problem("%s/%s: no profiler there (run the controller with -pprof; the shipped job: -var pprof=true)", dir, file)
				return false
			case code != http.StatusOK && !(path == "/healthz" && code == http.StatusServiceUnavailable):
				r.arc.problem("%s/%s: HTTP %d", dir, file, code)
				return false
			}
			if strings.HasSuffix(file, ".pprof") {
				r.arc.addProfile(dir+"/"+file, b)
			} else {
				r.arc.add(dir+"/"+file, b)
			}
			return true
		}
		if !get("/healthz", "healthz.json") {
			continue
		}
		get("/metrics", "metrics.txt")
		if get("/debug/pprof/goroutine?debug=1", "goroutine.txt") {
			get("/debug/pprof/heap", "heap.pprof")
			get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(cpu.Seconds())), "cpu.pprof")
		}
	}
}

func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(debugDefaultDuration)
}

// httpGet reads a URL within ctx, at most debugLogBytes*8 of it.
func httpGet(ctx context.Context, hc *http.Client, u string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, debugLogBytes*8))
	return b, resp.StatusCode, err
}
