package controller

import (
	"context"
	"crypto/tls"
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

// Handler serves /metrics (Prometheus), /healthz (JSON; 503 while the
// last round failed or none ran for three resync periods) and, unless
// CheckListen serves them apart, /v1/job/check and /v1/queue.
func (c *Controller) Handler() http.Handler { return c.web.handler() }

func (ep *endpoints) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(ep.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := ep.health()
		code := http.StatusOK
		stale := h.Leader && !h.LastReconcile.IsZero() && time.Since(h.LastReconcile) > 3*ep.cfg().Resync
		if h.LastError != "" || stale {
			code = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(h)
	})
	if ep.cfg().CheckListen == "" {
		mux.Handle("POST /v1/job/check", ep.checkHandler())
		mux.HandleFunc("GET /v1/queue", ep.serveQueue)
	}
	if ep.cfg().Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	}
	return mux
}

// checkHandler serves POST /v1/job/check within its bounds (checkguard.go).
func (ep *endpoints) checkHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/job/check", newCheckGuard(*ep.cfg()).wrap(http.HandlerFunc(ep.serveCheck)))
	mux.HandleFunc("GET /v1/queue", ep.serveQueue)
	return mux
}

// CheckRequest is the body of POST /v1/job/check: a job as Nomad's API
// takes it (`steward job check` parses the jobspec with Nomad first). The
// caller's Nomad token comes in the X-Nomad-Token header.
type CheckRequest struct {
	Job *api.Job `json:"Job"`
}

// serveCheck answers `steward job check` (see Check).
func (ep *endpoints) serveCheck(w http.ResponseWriter, r *http.Request) {
	var req CheckRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		code := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			code, err = http.StatusRequestEntityTooLarge, fmt.Errorf("the check request is larger than the %d bytes a check takes", tooBig.Limit)
		}
		writeJSONError(w, code, fmt.Errorf("decode check request: %w", err))
		return
	}
	token, ok := ep.callerToken(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
	defer cancel()
	res, err := ep.check(ctx, req.Job, token)
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

// checkTimeout bounds the Nomad plan a check asks for, so that a check
// holds one of the few check slots for a bounded time.
const checkTimeout = 20 * time.Second

// Serve runs the HTTP endpoints on cfg.Listen (and /v1/job/check on
// cfg.CheckListen when set) until ctx ends. It returns the address
// cfg.Listen listens on through ready (useful with port 0), and the check
// listener's through checkReady.
func (c *Controller) Serve(ctx context.Context, ready, checkReady func(addr string)) error {
	return c.web.serve(ctx, ready, checkReady)
}

func (ep *endpoints) serve(ctx context.Context, ready, checkReady func(addr string)) error {
	var tlsConf *tls.Config
	if ep.cfg().TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(ep.cfg().TLSCert, ep.cfg().TLSKey)
		if err != nil {
			return fmt.Errorf("load the check listener's TLS certificate: %w", err)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	type server struct {
		addr    string
		handler http.Handler
		tls     *tls.Config
		ready   func(string)
		check   bool
	}
	var servers []server
	if ep.cfg().Listen != "" {
		s := server{addr: ep.cfg().Listen, handler: ep.handler(), ready: ready, check: ep.cfg().CheckListen == ""}
		if s.check {
			s.tls = tlsConf
		}
		servers = append(servers, s)
	}
	if ep.cfg().CheckListen != "" {
		servers = append(servers, server{addr: ep.cfg().CheckListen, handler: ep.checkHandler(), tls: tlsConf, ready: checkReady, check: true})
	}
	if len(servers) == 0 {
		return nil
	}
	errs := make(chan error, len(servers))
	for _, s := range servers {
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			return err
		}
		scheme := "http://"
		if s.tls != nil {
			ln, scheme = tls.NewListener(ln, s.tls), "https://"
		}
		if s.ready != nil {
			s.ready(ln.Addr().String())
		}
		if s.check {
			ep.checkAddr.setUnlessSet(scheme + ln.Addr().String())
		}
		srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				errs <- err
				return
			}
			errs <- nil
		}()
	}
	var first error
	for range servers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
