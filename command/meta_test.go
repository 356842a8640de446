package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/cli"
)

// The general options: a flag overrides its environment variable, which
// overrides the default, for every option, as in the nomad CLI.
func TestMetaFlagsOverEnvironment(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"NOMAD_ADDR": "http://env:4646", "NOMAD_REGION": "env-region", "NOMAD_NAMESPACE": "env-ns",
		"NOMAD_TOKEN": "env-token", "NOMAD_CACERT": "env-ca.pem", "NOMAD_CAPATH": "env-cas",
		"NOMAD_CLIENT_CERT": "env-cert.pem", "NOMAD_CLIENT_KEY": "env-key.pem",
		"NOMAD_TLS_SERVER_NAME": "env.server", "NOMAD_SKIP_VERIFY": "",
	}
	type got struct{ addr, region, ns, token, ca, capath, cert, key, sni string }
	cases := []struct {
		name    string
		env     bool
		args    []string
		which   metaFlags
		want    got
		insec   bool
		wantErr string
	}{
		{name: "defaults", want: got{addr: "http://127.0.0.1:4646"}},
		{name: "environment", env: true, which: flagNamespace,
			want: got{"http://env:4646", "env-region", "env-ns", "env-token", "env-ca.pem", "env-cas", "env-cert.pem", "env-key.pem", "env.server"}},
		{name: "flags over environment", env: true, which: flagNamespace,
			args: []string{"-address", "http://flag:4646", "-region", "r", "-namespace", "ns", "-token", "t", "-ca-cert", "ca",
				"-ca-path", "cas", "-client-cert", "cert", "-client-key", "key", "-tls-server-name", "sni", "-tls-skip-verify"},
			want: got{"http://flag:4646", "r", "ns", "t", "ca", "cas", "cert", "key", "sni"}, insec: true},
		{name: "some flags, the rest from the environment", env: true, which: flagNamespace,
			args: []string{"-namespace", "research"},
			want: got{"http://env:4646", "env-region", "research", "env-token", "env-ca.pem", "env-cas", "env-cert.pem", "env-key.pem", "env.server"}},
		{name: "token file over NOMAD_TOKEN", env: true, which: flagTokenFile, args: []string{"-token-file", tokenFile},
			want: got{"http://env:4646", "env-region", "env-ns", "from-file", "env-ca.pem", "env-cas", "env-cert.pem", "env-key.pem", "env.server"}},
		{name: "token and token file", which: flagTokenFile, args: []string{"-token", "x", "-token-file", tokenFile},
			wantErr: "-token and -token-file both given"},
		{name: "no -namespace for the controller", which: flagTokenFile, args: []string{"-namespace", "x"},
			wantErr: "flag provided but not defined: -namespace"},
		{name: "no -token-file elsewhere", which: flagNamespace, args: []string{"-token-file", tokenFile},
			wantErr: "flag provided but not defined: -token-file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range env {
				if !tc.env {
					v = ""
				}
				t.Setenv(k, v)
			}
			m := &Meta{UI: cli.NewMockUi()}
			fs := m.FlagSet("test", tc.which)
			err := m.Parse(fs, tc.args)
			var cfgErr error
			if err == nil {
				cfg, e := m.Config()
				cfgErr = e
				if e == nil {
					g := got{cfg.Address, cfg.Region, cfg.Namespace, cfg.SecretID, cfg.TLSConfig.CACert, cfg.TLSConfig.CAPath,
						cfg.TLSConfig.ClientCert, cfg.TLSConfig.ClientKey, cfg.TLSConfig.TLSServerName}
					if g != tc.want || cfg.TLSConfig.Insecure != tc.insec {
						t.Errorf("config = %+v (insecure %t), want %+v (insecure %t)", g, cfg.TLSConfig.Insecure, tc.want, tc.insec)
					}
				}
			}
			if err == nil {
				err = cfgErr
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// Namespace: -namespace, else NOMAD_NAMESPACE, else none.
func TestMetaNamespace(t *testing.T) {
	cases := []struct{ env, flag, want string }{
		{"", "", ""}, {"ml", "", "ml"}, {"ml", "research", "research"}, {"", "*", "*"},
	}
	for _, tc := range cases {
		t.Setenv("NOMAD_NAMESPACE", tc.env)
		m := &Meta{UI: cli.NewMockUi()}
		fs := m.FlagSet("test", flagNamespace)
		var args []string
		if tc.flag != "" {
			args = []string{"-namespace", tc.flag}
		}
		if err := m.Parse(fs, args); err != nil {
			t.Fatal(err)
		}
		if got := m.Namespace(); got != tc.want {
			t.Errorf("env %q, flag %q: namespace %q, want %q", tc.env, tc.flag, got, tc.want)
		}
	}
}

// -no-color and NOMAD_CLI_NO_COLOR turn colour off (and output that is
// not a terminal, as under go test, never has it).
func TestMetaColor(t *testing.T) {
	cases := []struct {
		name, env string
		set       bool
		args      []string
	}{
		{name: "flag", args: []string{"-no-color"}},
		{name: "environment", env: "1", set: true},
		{name: "not a terminal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.set {
				t.Setenv("NOMAD_CLI_NO_COLOR", tc.env)
			}
			m := &Meta{UI: cli.NewMockUi()}
			if err := m.Parse(m.FlagSet("test", 0), tc.args); err != nil {
				t.Fatal(err)
			}
			if m.Color() {
				t.Errorf("colour on")
			}
			if _, colored := m.UI.(*cli.ColoredUi); colored {
				t.Errorf("the UI colours its errors")
			}
		})
	}
}

// The general options are listed once in each command's help, and each
// is accepted by each command that talks to Nomad.
func TestGeneralOptionsInEveryCommand(t *testing.T) {
	general := []string{"-address", "-region", "-token", "-ca-cert", "-ca-path", "-client-cert", "-client-key",
		"-tls-server-name", "-tls-skip-verify", "-no-color"}
	for _, words := range []string{"status", "queue", "plan", "pause", "resume", "job check", "controller", "operator setup", "operator debug"} {
		cmd := factories[words](cli.NewMockUi())
		help := cmd.Help()
		if n := strings.Count(help, "General Options"); n != 1 {
			t.Errorf("%s: help lists the general options %d times", words, n)
		}
		for _, f := range general {
			if !strings.Contains(help, f+"=") && !strings.Contains(help, "  "+f+"\n") {
				t.Errorf("%s: help lacks %s", words, f)
			}
		}
		// The controller and the operator's commands act on every namespace.
		if words != "controller" && !strings.HasPrefix(words, "operator ") && !strings.Contains(help, "-namespace=") {
			t.Errorf("%s: help lacks -namespace", words)
		}
		if ac, ok := cmd.(cli.CommandAutocomplete); !ok {
			t.Errorf("%s: no completion", words)
		} else {
			for _, f := range general {
				if _, ok := ac.AutocompleteFlags()[f]; !ok {
					t.Errorf("%s: completion lacks %s", words, f)
				}
			}
		}
	}
}
