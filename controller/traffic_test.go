package controller

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The traffic counter counts response bytes and requests by kind (read
// bytes also by endpoint: a PUT's response counts only in the total), and
// its metrics register together.
func TestTrafficCounted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("x", 1000))
	}))
	defer srv.Close()
	var tr Traffic
	client := &http.Client{Transport: tr.Wrap(http.DefaultTransport)}
	for i, method := range []string{http.MethodGet, http.MethodGet, http.MethodPut} {
		path := ""
		if i == 0 {
			path = "/v1/client/stats"
		}
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(tr.collectors()...)
	want := `
# HELP steward_nomad_http_read_bytes_total Bytes of Nomad API responses the controller read, the event stream included.
# TYPE steward_nomad_http_read_bytes_total counter
steward_nomad_http_read_bytes_total 3000
# HELP steward_nomad_http_read_endpoint_bytes_total Bytes of Nomad API responses to reads (GET), by what they are of.
# TYPE steward_nomad_http_read_endpoint_bytes_total counter
steward_nomad_http_read_endpoint_bytes_total{endpoint="allocation"} 0
steward_nomad_http_read_endpoint_bytes_total{endpoint="evaluation"} 0
steward_nomad_http_read_endpoint_bytes_total{endpoint="event"} 0
steward_nomad_http_read_endpoint_bytes_total{endpoint="job"} 0
steward_nomad_http_read_endpoint_bytes_total{endpoint="node"} 0
steward_nomad_http_read_endpoint_bytes_total{endpoint="other"} 1000
steward_nomad_http_read_endpoint_bytes_total{endpoint="stats"} 1000
steward_nomad_http_read_endpoint_bytes_total{endpoint="variable"} 0
# HELP steward_nomad_http_requests_total ` + requestsHelp + `
# TYPE steward_nomad_http_requests_total counter
steward_nomad_http_requests_total{kind="read"} 2
steward_nomad_http_requests_total{kind="write"} 1
# HELP steward_nomad_http_reads_total Nomad API reads the controller made, by what they are of.
# TYPE steward_nomad_http_reads_total counter
steward_nomad_http_reads_total{endpoint="allocation"} 0
steward_nomad_http_reads_total{endpoint="evaluation"} 0
steward_nomad_http_reads_total{endpoint="event"} 0
steward_nomad_http_reads_total{endpoint="job"} 0
steward_nomad_http_reads_total{endpoint="node"} 0
steward_nomad_http_reads_total{endpoint="other"} 1
steward_nomad_http_reads_total{endpoint="stats"} 1
steward_nomad_http_reads_total{endpoint="variable"} 0
# HELP steward_nomad_http_writes_total Nomad API writes the controller made, by what they are to.
# TYPE steward_nomad_http_writes_total counter
steward_nomad_http_writes_total{endpoint="allocation"} 0
steward_nomad_http_writes_total{endpoint="job"} 0
steward_nomad_http_writes_total{endpoint="lock"} 0
steward_nomad_http_writes_total{endpoint="other"} 1
steward_nomad_http_writes_total{endpoint="record"} 0
steward_nomad_http_writes_total{endpoint="state"} 0
steward_nomad_http_writes_total{endpoint="status"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
