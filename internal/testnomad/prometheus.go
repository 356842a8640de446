package testnomad

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvPrometheusBin points the tests at the Prometheus server (built from
// tools/prometheus); the GNUmakefile exports it.
const EnvPrometheusBin = "STEWARD_PROMETHEUS_BIN"

// PrometheusBin is the Prometheus server: $STEWARD_PROMETHEUS_BIN, else
// <repo root>/bin/prometheus. It fails the test when the file is missing.
func PrometheusBin(t testing.TB) string {
	t.Helper()
	return buildOutput(t, EnvPrometheusBin, "prometheus", false, "prometheus server binary", "make prometheus")
}

// Prometheus is a real Prometheus server on loopback, scraping targets
// every second, with its data in a test dir.
type Prometheus struct {
	// Address is its HTTP API base: http://127.0.0.1:PORT.
	Address string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	once    sync.Once
}

// StartPrometheus starts Prometheus scraping targets (host:port, path
// /metrics) every second, waits until it is ready, and stops it when the
// test ends.
func StartPrometheus(t testing.TB, targets ...string) *Prometheus {
	t.Helper()
	bin := PrometheusBin(t)
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = fmt.Sprintf("%q", tg)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: dcgm
    static_configs:
      - targets: [%s]
`, strings.Join(quoted, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p := &Prometheus{Address: "http://" + addr, LogPath: filepath.Join(dir, "prometheus.log"), done: make(chan struct{})}
	logFile, err := os.Create(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start prometheus %s: %v", bin, err)
	}
	go func() { _ = p.cmd.Wait(); logFile.Close(); close(p.done) }()
	t.Cleanup(p.Stop)
	WaitFor(t, 60*time.Second, "prometheus ready at "+p.Address, func() (bool, string) {
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.LogPath)
			t.Fatalf("prometheus exited at start:\n%s", b)
		default:
		}
		resp, err := http.Get(p.Address + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return p
}

// WaitSeries waits until an instant query of expr answers n series: until
// Prometheus has scraped what the test serves.
func (p *Prometheus) WaitSeries(t testing.TB, expr string, n int) {
	t.Helper()
	WaitFor(t, 30*time.Second, fmt.Sprintf("%d series of %s in prometheus", n, expr), func() (bool, string) {
		resp, err := http.Get(p.Address + "/api/v1/query?query=" + url.QueryEscape(expr))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var out struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return false, err.Error()
		}
		return len(out.Data.Result) == n, fmt.Sprintf("%d series", len(out.Data.Result))
	})
}

// Stop ends Prometheus (SIGTERM, then SIGKILL after 10 s) and waits.
func (p *Prometheus) Stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}

// FakeDCGM serves, on loopback, what NVIDIA's DCGM exporter serves for
// DCGM_FI_PROF_GR_ENGINE_ACTIVE (0..1), one series per GPU UUID, with the
// exporter's other labels, each value settable.
type FakeDCGM struct {
	// Target is its host:port, for a scrape config.
	Target string
	// Source, when set, gives a GPU's activity (0..1) at each scrape,
	// for the GPUs given at the start; ok false leaves it out.
	Source func(uuid string) (active float64, ok bool)
	mu     sync.Mutex
	active map[string]float64
	host   string
	srv    *http.Server
}

// StartFakeDCGM serves the GPUs uuids at active (0..1) until the test ends.
func StartFakeDCGM(t testing.TB, host string, active map[string]float64) *FakeDCGM {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &FakeDCGM{Target: l.Addr().String(), active: map[string]float64{}, host: host}
	for k, v := range active {
		d.active[k] = v
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", d.serve)
	d.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = d.srv.Serve(l) }()
	t.Cleanup(func() { _ = d.srv.Close() })
	return d
}

// Set sets a GPU's activity (0..1); a GPU set to a negative value is left
// out of the exposition.
func (d *FakeDCGM) Set(uuid string, active float64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.active[uuid] = active
}

func (d *FakeDCGM) serve(w http.ResponseWriter, _ *http.Request) {
	d.mu.Lock()
	ids := make([]string, 0, len(d.active))
	for id := range d.active {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	b.WriteString("# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.\n")
	b.WriteString("# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n")
	for i, id := range ids {
		v := d.active[id]
		if d.Source != nil {
			var ok bool
			if v, ok = d.Source(id); !ok {
				v = -1
			}
		}
		if v >= 0 {
			fmt.Fprintf(&b, "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"%d\",UUID=%q,device=\"nvidia%d\",modelName=\"NVIDIA A100-SXM4-80GB\",Hostname=%q,DCGM_FI_DRIVER_VERSION=\"550.54.15\"} %g\n",
				i, id, i, d.host, v)
		}
	}
	d.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write([]byte(b.String()))
}
