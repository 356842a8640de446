package e2e

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"testing"

	"github.com/gpu-steward/steward/controller"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// BenchmarkPrometheusActivityRead: what one read of the Prometheus activity
// source costs on the wire, against a real Prometheus server scraping a fake
// DCGM exporter with GPUs of random UUIDs, as NVML's are (the scale
// harness's simulated GPUs are named after their node and compress far
// better): the controller's query, gzip asked for, as the controller asks.
// wire-B/gpu times the cluster's GPUs times reads a minute (6 at the
// default -stats-interval) is what an idle cluster costs a minute.
//
//	go test -run '^$' -bench PrometheusActivityRead -benchtime 20x ./e2e
func BenchmarkPrometheusActivityRead(b *testing.B) {
	for _, gpus := range []int{800, 8000} {
		b.Run(fmt.Sprintf("gpus=%d", gpus), func(b *testing.B) {
			r := rand.New(rand.NewPCG(uint64(gpus), 33))
			active := map[string]float64{}
			for len(active) < gpus {
				active[fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xffff,
					r.Uint32()&0xffff, r.Uint64()&0xffffffffffff)] = float64(r.IntN(1000)) / 1000
			}
			dcgm := testnomad.StartFakeDCGM(b, "bench", active)
			prom := testnomad.StartPrometheus(b, dcgm.Target)
			prom.WaitSeries(b, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpus)
			cfg := controller.DefaultPrometheusConfig()
			q := url.Values{"query": {controller.PrometheusQueryExpr(cfg)}, "lookback_delta": {"1m"}}
			var wire, decoded int64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req, _ := http.NewRequest(http.MethodGet, prom.Address+"/api/v1/query?"+q.Encode(), nil)
				req.Header.Set("Accept-Encoding", "gzip")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "gzip" {
					b.Fatalf("answer: %v, %s, encoding %q", err, resp.Status, resp.Header.Get("Content-Encoding"))
				}
				wire += n
				if i == 0 {
					// The same answer decoded, once.
					plain, err := http.Get(prom.Address + "/api/v1/query?" + q.Encode())
					if err != nil {
						b.Fatal(err)
					}
					decoded, _ = io.Copy(io.Discard, plain.Body)
					plain.Body.Close()
				}
			}
			b.ReportMetric(float64(wire)/float64(b.N), "wire-B/op")
			b.ReportMetric(float64(wire)/float64(b.N)/float64(gpus), "wire-B/gpu")
			b.ReportMetric(float64(decoded)/float64(gpus), "decoded-B/gpu")
		})
	}
}
