package controller

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// The Prometheus activity source reads every GPU's utilisation with one
// instant query per stats interval, whatever the cluster's size, where the
// Nomad source reads each covered node's host stats (one forwarded request
// per node). The query's series are mapped to allocations by the GPU UUIDs
// Nomad reports as each allocation's device IDs (a MIG instance's
// "MIG-..." UUID included): the exporter (NVIDIA's DCGM exporter, or any
// other) must label each series with that UUID.
//
// Prometheus is the operator's, not a tenant's, but a misconfigured query
// (one that matches every series of a large Prometheus) must not eat the
// controller's memory: the response is cut at MaxBytes and MaxSeries, and
// the read then fails like any other failure of the source (idle rules
// pause: activity.go).

// Activity sources (Config.ActivitySource).
const (
	ActivityNomad      = "nomad"
	ActivityPrometheus = "prometheus"
)

// Defaults of the Prometheus source (docs/reference/controller.md).
const (
	// DefaultPrometheusQuery is DCGM's graphics-engine activity, which
	// covers MIG instances too, as a percentage (the metric is 0..1).
	DefaultPrometheusQuery     = "100 * DCGM_FI_PROF_GR_ENGINE_ACTIVE"
	DefaultPrometheusUUIDLabel = "UUID"
	DefaultPrometheusMaxAge    = time.Minute
	DefaultPrometheusMaxSeries = 262144
	DefaultPrometheusMaxBytes  = 64 << 20
)

// migInstanceLabel is the label DCGM's exporter gives a MIG instance's
// series (its GPU instance ID), beside the parent GPU's UUID.
const migInstanceLabel = "GPU_I_ID"

// PrometheusConfig is where and how the Prometheus source reads.
type PrometheusConfig struct {
	// Address is Prometheus's HTTP API base, e.g. http://127.0.0.1:9090.
	Address string
	// Query is a PromQL expression whose series are GPU utilisation in
	// percent (0..100), each labelled with its GPU's UUID in UUIDLabel.
	Query     string
	UUIDLabel string
	// MaxAge refuses samples older than this at the query's time.
	MaxAge time.Duration
	// MaxSeries and MaxBytes (the decoded body) bound one answer.
	MaxSeries int
	MaxBytes  int64
}

// DefaultPrometheusConfig returns the defaults for an address.
func DefaultPrometheusConfig() PrometheusConfig {
	return PrometheusConfig{Query: DefaultPrometheusQuery, UUIDLabel: DefaultPrometheusUUIDLabel,
		MaxAge: DefaultPrometheusMaxAge, MaxSeries: DefaultPrometheusMaxSeries, MaxBytes: DefaultPrometheusMaxBytes}
}

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

func (p PrometheusConfig) validate() error {
	switch {
	case p.Address == "":
		return fmt.Errorf("-activity-source prometheus needs -prometheus-address (http://HOST:PORT)")
	case !strings.HasPrefix(p.Address, "http://") && !strings.HasPrefix(p.Address, "https://"):
		return fmt.Errorf("-prometheus-address %q: want http(s)://HOST:PORT", p.Address)
	case strings.TrimSpace(p.Query) == "":
		return fmt.Errorf("-prometheus-query is empty")
	case !labelName.MatchString(p.UUIDLabel):
		return fmt.Errorf("-prometheus-uuid-label %q: not a Prometheus label name", p.UUIDLabel)
	case p.MaxAge <= 0:
		return fmt.Errorf("-activity-max-age %s: must be positive", p.MaxAge)
	case p.MaxSeries < 1 || p.MaxBytes < 1:
		return fmt.Errorf("prometheus bounds %d series, %d bytes: both must be positive", p.MaxSeries, p.MaxBytes)
	}
	return nil
}

// promSource reads GPU activity from Prometheus.
type promSource struct {
	cfg  PrometheusConfig
	api  promv1.API
	expr string
	// wire and decoded count the bytes of answers: as sent (gzip) and
	// as decoded.
	wire, decoded atomic.Int64
	queries       atomic.Int64
}

func newPromSource(cfg PrometheusConfig) (*promSource, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &promSource{cfg: cfg,
		// max by: one series per GPU (or MIG instance) whatever the
		// exporter's other labels, which are most of an answer's bytes;
		// and where two scrapes report one GPU, the busier reading wins.
		expr: PrometheusQueryExpr(cfg)}
	client, err := promapi.NewClient(promapi.Config{Address: cfg.Address,
		RoundTripper: &boundedTransport{rt: http.DefaultTransport, max: cfg.MaxBytes, wire: &p.wire, decoded: &p.decoded}})
	if err != nil {
		return nil, fmt.Errorf("prometheus client for %s: %w", cfg.Address, err)
	}
	p.api = promv1.NewAPI(client)
	return p, nil
}

// PrometheusQueryExpr is the expression the Prometheus source sends: max
// by the UUID label (and DCGM's MIG instance label) of the query.
func PrometheusQueryExpr(cfg PrometheusConfig) string {
	return fmt.Sprintf("max by (%s, %s) (%s)", cfg.UUIDLabel, migInstanceLabel, cfg.Query)
}

// read runs the query at now and returns each GPU's reading by UUID (a MIG
// instance's by its MIG UUID). A GPU whose sample is older than MaxAge, or
// not a percentage, is refused. An answer with no series at all is an
// error: the query matches nothing, so every GPU would be unread.
func (p *promSource) read(ctx context.Context, now time.Time) (map[string]gpuReading, error) {
	p.queries.Add(1)
	// The lookback is the age bound: a GPU whose newest sample is older
	// has no series (Prometheus's default would take one up to 5m old).
	// Samples are checked again here, for answers a caching proxy kept.
	v, _, err := p.api.Query(ctx, p.expr, now, promv1.WithLimit(uint64(p.cfg.MaxSeries)+1), promv1.WithLookbackDelta(p.cfg.MaxAge))
	if err != nil {
		return nil, fmt.Errorf("query %s at %s: %w", p.expr, p.cfg.Address, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %s at %s: answered a %s, not an instant vector", p.expr, p.cfg.Address, v.Type())
	}
	switch {
	case len(vec) == 0:
		return nil, fmt.Errorf("query %s at %s: no series (is the exporter scraped, and its series labelled %s?)", p.expr, p.cfg.Address, p.cfg.UUIDLabel)
	case len(vec) > p.cfg.MaxSeries:
		return nil, fmt.Errorf("query %s at %s: more than %d series: refused (a query that matches more than the cluster's GPUs)", p.expr, p.cfg.Address, p.cfg.MaxSeries)
	}
	return p.readings(vec, now), nil
}

// readings maps a query's series to GPUs.
func (p *promSource) readings(vec model.Vector, now time.Time) map[string]gpuReading {
	out := make(map[string]gpuReading, len(vec))
	for _, s := range vec {
		id := string(s.Metric[model.LabelName(p.cfg.UUIDLabel)])
		if id == "" {
			continue
		}
		if gi := s.Metric[migInstanceLabel]; gi != "" && !strings.HasPrefix(id, "MIG-") {
			// DCGM labels a MIG instance with its parent's UUID and
			// its instance ID: never the parent's reading. Relabel it
			// to the MIG UUID to use it (docs/reference/controller.md).
			continue
		}
		r := p.reading(s, now)
		if old, dup := out[id]; dup {
			// Two series for one GPU (two exporters, two scrape jobs):
			// the busier reading wins, and a GPU with any good
			// reading is read, so that nothing looks idle that one
			// source says is busy.
			if old.refused == "" && (r.refused != "" || old.util >= r.util) {
				continue
			}
		}
		out[id] = r
	}
	return out
}

func (p *promSource) reading(s *model.Sample, now time.Time) gpuReading {
	at := s.Timestamp.Time()
	v := float64(s.Value)
	switch {
	case now.Sub(at) > p.cfg.MaxAge:
		return gpuReading{refused: fmt.Sprintf("its newest Prometheus sample is from %s, %s before the read (the bound is %s)",
			at.UTC().Format(time.RFC3339), now.Sub(at).Round(time.Second), p.cfg.MaxAge)}
	case math.IsNaN(v) || v < 0 || v > 100.5:
		return gpuReading{refused: fmt.Sprintf("Prometheus reads %g for it, not a utilisation in percent (0..100): check -prometheus-query", v)}
	}
	return gpuReading{util: min(v, 100)}
}

// missing is the refusal of a GPU the answer has no series for.
func (p *promSource) missing(id string) string {
	return fmt.Sprintf("Prometheus has no sample of %s with %s=%q in the last %s", p.cfg.Query, p.cfg.UUIDLabel, id, p.cfg.MaxAge)
}

// errTooLarge cuts an answer over MaxBytes.
var errTooLarge = errors.New("answer too large")

// boundedTransport asks for gzip itself (so that the wire bytes can be
// counted) and cuts a decoded body at max bytes.
type boundedTransport struct {
	rt            http.RoundTripper
	max           int64
	wire, decoded *atomic.Int64
}

func (b *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := b.rt.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	var body io.Reader = countingReader{r: resp.Body, n: b.wire}
	raw := resp.Body
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(body)
		if err != nil {
			raw.Close()
			return nil, fmt.Errorf("gzip answer from %s: %w", req.URL.Host, err)
		}
		body = zr
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
		resp.Uncompressed = true
	}
	resp.Body = &limitedBody{r: countingReader{r: body, n: b.decoded}, left: b.max, max: b.max, closer: raw}
	return resp, nil
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// limitedBody fails a read past max bytes, rather than ending the body
// quietly: a cut JSON answer must be an error, not a shorter answer.
type limitedBody struct {
	r         io.Reader
	left, max int64
	closer    io.Closer
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// max bytes read: the body may end here, or go on.
		var one [1]byte
		if n, err := l.r.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: more than %d bytes", errTooLarge, l.max)
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

func (l *limitedBody) Close() error { return l.closer.Close() }
