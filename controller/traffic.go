package controller

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Traffic counts what the controller exchanges with Nomad's HTTP API: the
// bytes it reads (response bodies, the event stream included) and its
// requests, reads (GET) and writes (the rest). The scale harness reports
// them per minute; steward_nomad_http_* export them.
type Traffic struct {
	readBytes, reads, writes atomic.Int64
	// byEndpoint counts writes per endpoint class (writeClasses), and
	// readsBy reads (readClasses).
	byEndpoint [len(writeClasses)]atomic.Int64
	readsBy    [len(readClasses)]atomic.Int64
	// readBytesBy counts response bytes per read class: what a quiet
	// cluster costs is the resync and GPU stats, not the event stream.
	readBytesBy [len(readClasses)]atomic.Int64
}

// readClasses name what a read is of, by its path; "stats" is GPU
// activity (a client's host stats, forwarded by the servers).
var readClasses = [...]string{"variable", "job", "allocation", "node", "evaluation", "event", "stats", "other"}

func readClass(path string) int {
	for i, prefix := range [][]string{{"/v1/var"}, {"/v1/job"}, {"/v1/allocation"}, {"/v1/node"},
		{"/v1/evaluation"}, {"/v1/event"}, {"/v1/client/stats"}} {
		for _, p := range prefix {
			if strings.HasPrefix(path, p) {
				return i
			}
		}
	}
	return len(readClasses) - 1
}

// writeClasses name what a write is to, by its path: job states, job
// records, the status and the leader lock (variables), jobs (scale,
// register), allocations (stop, signal), anything else.
var writeClasses = [...]string{"state", "record", "status", "lock", "job", "allocation", "other"}

func writeClass(path string) int {
	switch {
	case strings.HasPrefix(path, "/v1/var/"+statePrefix):
		return 0
	case strings.HasPrefix(path, "/v1/var/nomad/jobs/"):
		return 1
	case strings.HasPrefix(path, "/v1/var/"+StatusPath):
		return 2
	case strings.HasPrefix(path, "/v1/var/"):
		return 3 // the leader lock (its path is configurable)
	case strings.HasPrefix(path, "/v1/job/") || strings.HasPrefix(path, "/v1/jobs"):
		return 4
	case strings.HasPrefix(path, "/v1/allocation/") || strings.HasPrefix(path, "/v1/client/allocation/"):
		return 5
	}
	return 6
}

// Wrap returns a transport that counts on t what rt carries.
func (t *Traffic) Wrap(rt http.RoundTripper) http.RoundTripper {
	return trafficTransport{rt: rt, t: t}
}

type trafficTransport struct {
	rt http.RoundTripper
	t  *Traffic
}

func (tt trafficTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	class := -1
	if req.Method == http.MethodGet || req.Method == http.MethodHead {
		class = readClass(req.URL.Path)
		tt.t.reads.Add(1)
		tt.t.readsBy[class].Add(1)
	} else {
		tt.t.writes.Add(1)
		tt.t.byEndpoint[writeClass(req.URL.Path)].Add(1)
	}
	resp, err := tt.rt.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		resp.Body = countingBody{ReadCloser: resp.Body, n: &tt.t.readBytes}
		if class >= 0 {
			resp.Body = countingBody{ReadCloser: resp.Body, n: &tt.t.readBytesBy[class]}
		}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

const requestsHelp = "Nomad API requests the controller made: reads (GET, HEAD) and writes (every other method)."

// collectors export the counts.
func (t *Traffic) collectors() []prometheus.Collector {
	out := []prometheus.Collector{}
	for i, class := range readClasses {
		out = append(out, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "steward_nomad_http_reads_total",
			Help: "Nomad API reads the controller made, by what they are of.", ConstLabels: prometheus.Labels{"endpoint": class}},
			func() float64 { return float64(t.readsBy[i].Load()) }))
	}
	for i, class := range readClasses {
		out = append(out, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "steward_nomad_http_read_endpoint_bytes_total",
			Help: "Bytes of Nomad API responses to reads (GET), by what they are of.", ConstLabels: prometheus.Labels{"endpoint": class}},
			func() float64 { return float64(t.readBytesBy[i].Load()) }))
	}
	for i, class := range writeClasses {
		out = append(out, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "steward_nomad_http_writes_total",
			Help: "Nomad API writes the controller made, by what they are to.", ConstLabels: prometheus.Labels{"endpoint": class}},
			func() float64 { return float64(t.byEndpoint[i].Load()) }))
	}
	return append(out,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "steward_nomad_http_read_bytes_total",
			Help: "Bytes of Nomad API responses the controller read, the event stream included."},
			func() float64 { return float64(t.readBytes.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "steward_nomad_http_requests_total",
			Help: requestsHelp, ConstLabels: prometheus.Labels{"kind": "read"}},
			func() float64 { return float64(t.reads.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "steward_nomad_http_requests_total",
			Help: requestsHelp, ConstLabels: prometheus.Labels{"kind": "write"}},
			func() float64 { return float64(t.writes.Load()) }),
	)
}
