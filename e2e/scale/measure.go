package scale

import (
	"fmt"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpu-steward/steward/internal/procs"
)

// scrape reads a controller's metrics.
func scrape(addr string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse metrics of %s: %w", addr, err)
	}
	return mfs, nil
}

// counter is a counter's value (the series with label kind=kind, when
// kind is set), 0 when absent.
func counter(mfs map[string]*dto.MetricFamily, name, kind string) float64 {
	return counterWith(mfs, name, "kind", kind)
}

// counterWith is the counter's series with label=value (any when value
// is "").
func counterWith(mfs map[string]*dto.MetricFamily, name, label, value string) float64 {
	mf := mfs[name]
	if mf == nil {
		return 0
	}
	for _, m := range mf.Metric {
		if value != "" && !hasLabel(m, label, value) {
			continue
		}
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
	}
	return 0
}

// counterSum adds up every series of a counter.
func counterSum(mfs map[string]*dto.MetricFamily, name string) float64 {
	mf := mfs[name]
	if mf == nil {
		return 0
	}
	sum := 0.0
	for _, m := range mf.Metric {
		if c := m.GetCounter(); c != nil {
			sum += c.GetValue()
		}
	}
	return sum
}

// actionsByKind is the window's steward_actions_total by kind, as text.
func actionsByKind(before, after map[string]*dto.MetricFamily) string {
	by := map[string]float64{}
	add := func(mfs map[string]*dto.MetricFamily, sign float64) {
		if mf := mfs["steward_actions_total"]; mf != nil {
			for _, m := range mf.Metric {
				for _, l := range m.Label {
					if l.GetName() == "kind" && m.GetCounter() != nil {
						by[l.GetValue()] += sign * m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	add(before, -1)
	add(after, 1)
	var out []string
	for k, v := range by {
		if v > 0 {
			out = append(out, fmt.Sprintf("%s %.0f", k, v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.Label {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// histogram is a histogram's cumulative buckets (upper bound → count).
func histogram(mfs map[string]*dto.MetricFamily, name string) map[float64]uint64 {
	out := map[float64]uint64{}
	mf := mfs[name]
	if mf == nil || len(mf.Metric) == 0 {
		return out
	}
	h := mf.Metric[0].GetHistogram()
	for _, b := range h.Bucket {
		out[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	out[math.Inf(1)] = h.GetSampleCount()
	return out
}

// quantileBetween is the q-quantile of what a histogram gained between two
// scrapes, as the upper bound of the bucket it falls in (NaN: no samples).
func quantileBetween(before, after map[float64]uint64, q float64) float64 {
	bounds := make([]float64, 0, len(after))
	for b := range after {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	total := after[math.Inf(1)] - before[math.Inf(1)]
	if total == 0 {
		return math.NaN()
	}
	for _, b := range bounds {
		if float64(after[b]-before[b]) >= q*float64(total) {
			return b
		}
	}
	return math.Inf(1)
}

// procSample is a process's CPU time, resident memory, and bytes it read
// with read calls (rchar: its sockets to Nomad, counted by the kernel,
// whatever the process's own metrics say).
type procSample struct {
	cpu   time.Duration
	rss   int64 // bytes
	rchar int64
}

// readProc reads a process's stat (utime, stime, rss) and io (rchar)
// through internal/procs.
func readProc(pid int) (procSample, error) {
	h, err := procs.Host()
	if err != nil {
		return procSample{}, err
	}
	st, err := h.Stat(pid)
	if err != nil {
		return procSample{}, fmt.Errorf("read stat of %d: %w", pid, err)
	}
	s := procSample{cpu: st.User + st.System, rss: int64(st.RSSBytes)}
	if rchar, err := h.ReadChars(pid); err == nil {
		s.rchar = int64(rchar)
	}
	return s, nil
}

// logLines collects a process's output, for reading decision latencies.
type logLines struct {
	mu    sync.Mutex
	lines []string
	part  string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	text := l.part + string(p)
	parts := strings.Split(text, "\n")
	l.part = parts[len(parts)-1]
	l.lines = append(l.lines, parts[:len(parts)-1]...)
	return len(p), nil
}

func (l *logLines) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := max(0, len(l.lines)-n)
	return strings.Join(l.lines[from:], "\n")
}

// The controller's log lines for a lease renewal that failed (it retries
// until its deadline) and for a lead lost.
const (
	renewFailed   = "renew the leader lock; retrying"
	leadLost      = "lost the leader lock"
	renewSlow     = "slow renewal of the leader lease"
	termTakenBack = "the term this copy led with until its lease ran out"
)

// count is how many lines hold text.
func (l *logLines) count(text string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, text) {
			n++
		}
	}
	return n
}

// firstRound is the start of the line a new leader's first round logs
// (controller/phasetimes.go).
const firstRound = "round phases: round=1 "

// lastWith is the last line that holds text, "" when none does.
func (l *logLines) lastWith(text string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.lines) - 1; i >= 0; i-- {
		if strings.Contains(l.lines[i], text) {
			return l.lines[i]
		}
	}
	return ""
}

var (
	latencyRE     = regexp.MustCompile(`^(\S+) .*reason="(\w+): .*decision_latency=(\S+)`)
	leftToNomadRE = regexp.MustCompile(` left_to_nomad=(\S+)`)
)

// latencies are the decision latencies the controller logged between two
// times (hclog's timestamp starts each line), by the rule of the action.
// Only preemptions made for waiting work as soon as it waits (rules
// priority, reclaim, backfill) measure how fast the controller reacts: an
// idle rule acts only once its "after" has passed, and a limit when work
// goes over it, whatever the pressure. own are the same decisions less
// the part the line says was Nomad's to place (left_to_nomad: from the
// blocking to the last round that counted the work placeable on free GPUs
// and left it to Nomad): the controller's own decision (issue 33).
func (l *logLines) latencies(from, to time.Time) (byRule, own map[string][]time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out, own := map[string][]time.Duration{}, map[string][]time.Duration{}
	for _, line := range l.lines {
		m := latencyRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse("2006-01-02T15:04:05.000Z0700", m[1])
		if err != nil || at.Before(from) || at.After(to) {
			continue
		}
		d, err := time.ParseDuration(strings.Trim(m[3], `"`))
		if err != nil {
			continue
		}
		out[m[2]] = append(out[m[2]], d)
		if n := leftToNomadRE.FindStringSubmatch(line); n != nil {
			if left, err := time.ParseDuration(strings.Trim(n[1], `"`)); err == nil {
				d = max(d-left, 0)
			}
		}
		own[m[2]] = append(own[m[2]], d)
	}
	return out, own
}

// percentile is the nearest-rank p-th percentile (NaN when empty).
func percentile(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return math.NaN()
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, k int) bool { return s[i] < s[k] })
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return float64(s[max(0, i)]) / float64(time.Millisecond)
}

// latencyByRule describes the latencies per rule: "idle 103: 303/29633".
func latencyByRule(by map[string][]time.Duration) string {
	rules := make([]string, 0, len(by))
	for r := range by {
		rules = append(rules, r)
	}
	sort.Strings(rules)
	var parts []string
	for _, r := range rules {
		parts = append(parts, fmt.Sprintf("%s %d: %.0f/%.0f", r, len(by[r]), percentile(by[r], 50), percentile(by[r], 99)))
	}
	return strings.Join(parts, ", ")
}
