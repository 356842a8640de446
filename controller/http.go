package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /metrics (Prometheus) and /healthz (JSON; 503 while the
// last round failed or none ran for three resync periods).
func (c *Controller) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(c.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := c.Health()
		code := http.StatusOK
		stale := h.Leader && !h.LastReconcile.IsZero() && time.Since(h.LastReconcile) > 3*c.cfg.Resync
		if h.LastError != "" || stale {
			code = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(h)
	})
	mux.HandleFunc("POST /v1/job/check", c.serveCheck)
	if c.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	}
	return mux
}

// CheckRequest is the body of POST /v1/job/check: a job as Nomad's API
// takes it (`steward job check` parses the jobspec with Nomad first). The
// caller's Nomad token comes in the X-Nomad-Token header.
type CheckRequest struct {
	Job *api.Job `json:"Job"`
}

// serveCheck answers `steward job check` (see Check).
func (c *Controller) serveCheck(w http.ResponseWriter, r *http.Request) {
	var req CheckRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<20)).Decode(&req); err != nil {
		writeJSONError(w, http.StatusBadRequest, fmt.Errorf("decode check request: %w", err))
		return
	}
	res, err := c.Check(req.Job, r.Header.Get("X-Nomad-Token"))
	switch {
	case err == nil:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	case errors.Is(err, errNotLeading), errors.Is(err, errNoRound):
		writeJSONError(w, http.StatusServiceUnavailable, err)
	case isForbidden(err):
		writeJSONError(w, http.StatusForbidden, err)
	default:
		writeJSONError(w, http.StatusBadRequest, err)
	}
}

func writeJSONError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// Serve runs the HTTP endpoints on cfg.Listen until ctx ends. It returns
// the address it listens on through ready (useful with port 0).
func (c *Controller) Serve(ctx context.Context, ready func(addr string)) error {
	if c.cfg.Listen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", c.cfg.Listen)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(ln.Addr().String())
	}
	c.mu.Lock()
	if c.checkAddr == "" {
		c.checkAddr = "http://" + ln.Addr().String()
	}
	c.mu.Unlock()
	srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
