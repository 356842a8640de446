package controller

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"time"

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
	return mux
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
