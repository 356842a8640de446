package command

import (
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// failDial is a transport that fails the test if anything is sent.
type failDial struct{ sent atomic.Int32 }

func (f *failDial) RoundTrip(*http.Request) (*http.Response, error) {
	f.sent.Add(1)
	return nil, errors.New("sent")
}

// TestJobCheckTokenNeverInCleartextOffLoopback: `steward job check` sends
// the caller's token over TLS, or in cleartext to loopback only; anything
// else is refused before a byte leaves.
func TestJobCheckTokenNeverInCleartextOffLoopback(t *testing.T) {
	cases := []struct {
		name, addr, token string
		wantErr           string
	}{
		{name: "cleartext to a host address refused", addr: "http://192.0.2.10:9646", token: "secret",
			wantErr: "refusing to send your Nomad token in cleartext to http://192.0.2.10:9646, which is not loopback"},
		{name: "cleartext to a host name refused", addr: "http://ctl.example:9646", token: "secret", wantErr: "in cleartext"},
		{name: "cleartext to loopback", addr: "http://127.0.0.1:9646", token: "secret"},
		{name: "cleartext to localhost", addr: "http://localhost:9646", token: "secret"},
		{name: "TLS to a host address", addr: "https://192.0.2.10:9646", token: "secret"},
		{name: "no token to send", addr: "http://192.0.2.10:9646"},
		{name: "not a URL", addr: "192.0.2.10:9646", token: "secret", wantErr: "want http(s)://HOST:PORT"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tokenTransportOK(tc.addr, tc.token)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if tc.wantErr == "" {
				return
			}
			fd := &failDial{}
			c := &JobCheckCommand{HTTP: &http.Client{Transport: fd}}
			id := "j"
			if _, err := c.ask(tc.addr, "", tc.token, &api.Job{ID: &id}); err == nil || fd.sent.Load() != 0 {
				t.Errorf("ask: err %v, %d requests sent; want refused, none sent", err, fd.sent.Load())
			}
		})
	}
}

// TestJobCheckOverTLSWithControllerCA: the check reaches a controller
// over TLS verified against -controller-ca; a certificate it does not
// sign is refused before the token is sent; a redirect is not followed
// (it would carry the token header elsewhere).
func TestJobCheckOverTLSWithControllerCA(t *testing.T) {
	var gotToken atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotToken.Store(r.Header.Get("X-Nomad-Token"))
		if r.URL.Query().Get("x") == "" && strings.HasSuffix(r.URL.Path, "/redirect/v1/job/check") {
			http.Redirect(w, r, "/elsewhere?x=1", http.StatusTemporaryRedirect)
			return
		}
		if r.URL.Path == "/elsewhere" {
			t.Errorf("the redirect was followed with token %q", r.Header.Get("X-Nomad-Token"))
		}
		_, _ = w.Write([]byte(`{"job":"j","namespace":"ml","tier":"training","groups":[]}`))
	}))
	// The refused handshake is the point: not worth a log line.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	id := "j"
	c := &JobCheckCommand{}
	res, err := c.ask(srv.URL, ca, "secret", &api.Job{ID: &id})
	if err != nil || res.Job != "j" || gotToken.Load() != "secret" {
		t.Fatalf("over TLS with the CA: %v %+v token %v", err, res, gotToken.Load())
	}
	gotToken.Store("")
	if _, err := c.ask(srv.URL, "", "secret", &api.Job{ID: &id}); err == nil || !strings.Contains(err.Error(), "certificate") || gotToken.Load() != "" {
		t.Errorf("an unknown certificate: err %v, token seen %q; want refused before sending", err, gotToken.Load())
	}
	if _, err := c.ask(srv.URL+"/redirect", ca, "secret", &api.Job{ID: &id}); err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Errorf("a redirect: err %v, want refused", err)
	}
}

// TestJobCheckPublishedLoopbackOnlyWhereNomadIs: a loopback check
// address the leader published is the controller node's; from a machine
// that reaches Nomad elsewhere the token is not sent to this machine's
// loopback, where any local process may listen.
func TestJobCheckPublishedLoopbackOnlyWhereNomadIs(t *testing.T) {
	cases := []struct {
		name, check, nomad string
		wantErr            bool
	}{
		{name: "all on one machine", check: "http://127.0.0.1:9646", nomad: "http://127.0.0.1:4646"},
		{name: "Nomad through the task API socket", check: "http://127.0.0.1:9646", nomad: "unix:///secrets/api.sock"},
		{name: "published loopback, Nomad elsewhere: refused", check: "http://127.0.0.1:9646", nomad: "https://nomad.example:4646", wantErr: true},
		{name: "published TLS address", check: "https://10.0.0.5:9646", nomad: "https://nomad.example:4646"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := publishedAddrOK(tc.check, tc.nomad)
			if (err != nil) != tc.wantErr || err != nil && !strings.Contains(err.Error(), "its node's loopback (http://127.0.0.1:9646)") {
				t.Errorf("err = %v, want error %t", err, tc.wantErr)
			}
		})
	}
}
