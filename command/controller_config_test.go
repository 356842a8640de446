package command

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-steward/steward/controller"
)

// TestControllerConfigFile (issue 34, item 3): -config FILE is the
// controller's flags in HCL. Each attribute sets its flag, a flag on the
// command line wins over the file, and every mistake is reported at its
// file:line,col, as in policy files.
func TestControllerConfigFile(t *testing.T) {
	const full = `policy    = ["a.hcl", "b.hcl"]
log_level = "debug"
dry_run   = true
resync    = "45s"

nomad {
  address    = "https://127.0.0.1:4646"
  token_file = "/secrets/nomad-token"
  ca_cert    = "/etc/nomad/ca.pem"
  timeout    = "20s"
}
telemetry {
  listen = "0.0.0.0:9646"
}
check {
  listen      = "127.0.0.1:9647"
  concurrency = 8
  rate        = 2.5
}
high_availability {
  lock_ttl        = "30s"
  consul_address  = "127.0.0.1:8500"
}
state {
  namespace   = "ops-steward"
  job_records = false
}
`
	cases := []struct {
		name     string
		file     string
		args     []string
		want     map[string]string // flag -> value after
		policies []string
		errs     []string // in the diagnostics
	}{
		{name: "every block", file: full,
			want: map[string]string{"log-level": "debug", "dry-run": "true", "resync": "45s", "address": "https://127.0.0.1:4646",
				"token-file": "/secrets/nomad-token", "ca-cert": "/etc/nomad/ca.pem", "nomad-timeout": "20s", "listen": "0.0.0.0:9646",
				"check-listen": "127.0.0.1:9647", "check-concurrency": "8", "check-rate": "2.5", "lock-ttl": "30s",
				"consul-address": "127.0.0.1:8500", "state-namespace": "ops-steward", "job-records": "false"},
			policies: []string{"a.hcl", "b.hcl"}},
		{name: "the command line wins", file: full, args: []string{"-log-level", "warn", "-policy", "c.hcl", "-listen", ""},
			want:     map[string]string{"log-level": "warn", "listen": "", "resync": "45s"},
			policies: []string{"c.hcl"}},
		{name: "an unknown attribute", file: "nomad {\n  adress = \"x\"\n}\n",
			errs: []string{"c.hcl:2,3-9: error: Unsupported argument", `An argument named "adress" is not expected here. Did you mean "address"?`}},
		{name: "a duration that does not parse", file: "resync = \"30 seconds\"\n",
			errs: []string{"c.hcl:1,10-22: error: Invalid resync", `resync must be a duration such as "30s"`, "(flag -resync)"}},
		{name: "a string for a number", file: "check {\n  burst = \"lots\"\n}\n",
			errs: []string{"c.hcl:2,11-17: error: Invalid burst", "burst must be a number (flag -check-burst)"}},
		{name: "a fraction for a whole number", file: "check {\n  concurrency = 2.5\n}\n",
			errs: []string{"c.hcl:2,17-20: error: Invalid concurrency", "must be a whole number"}},
		{name: "a block twice", file: "state {}\nstate {}\n",
			errs: []string{"c.hcl:2,1-6: error: Duplicate state block"}},
		{name: "a variable", file: "log_level = var.level\n",
			errs: []string{"c.hcl:1,13-16: error: Variables not allowed"}},
		{name: "an unknown block", file: "telemetry {}\nvault {}\n",
			errs: []string{"c.hcl:2,1-6: error: Unsupported block type"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.hcl")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := controller.DefaultConfig()
			var o controllerOptions
			fs := (&ControllerCommand{}).flagSet(&cfg, &o)
			policies := &o.policies
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			explicit := map[string]bool{}
			fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
			diags, ok := applyControllerConfig(fs, path, explicit)
			if len(tc.errs) > 0 {
				if ok {
					t.Fatalf("no error; diagnostics %q", diags)
				}
				for _, e := range tc.errs {
					if !strings.Contains(diags, strings.Replace(e, "c.hcl", path, 1)) {
						t.Errorf("diagnostics lack %q:\n%s", e, diags)
					}
				}
				return
			}
			if !ok {
				t.Fatalf("errors: %s", diags)
			}
			for name, want := range tc.want {
				if got := fs.Lookup(name).Value.String(); got != want {
					t.Errorf("-%s = %q, want %q", name, got, want)
				}
			}
			if strings.Join(*policies, ",") != strings.Join(tc.policies, ",") {
				t.Errorf("policies %q, want %q", policies, tc.policies)
			}
		})
	}
}

// TestConfigSchemaNamesRealFlags: every attribute of the configuration
// file sets a flag the controller has, and every flag but -config (and the
// general ones a file has no business with: -token, the CLI's -namespace
// and -no-color) can be set from the file.
func TestConfigSchemaNamesRealFlags(t *testing.T) {
	cfg := controller.DefaultConfig()
	var o controllerOptions
	fs := (&ControllerCommand{}).flagSet(&cfg, &o)
	inFile := map[string]bool{}
	for block, attrs := range configSchema {
		for _, a := range attrs {
			if fs.Lookup(a.flag) == nil {
				t.Errorf("%s %s sets -%s, which the controller does not have", block, a.name, a.flag)
			}
			inFile[a.flag] = true
		}
	}
	notInFile := map[string]bool{"config": true, "token": true, "no-color": true}
	fs.VisitAll(func(f *flag.Flag) {
		if !inFile[f.Name] && !notInFile[f.Name] {
			t.Errorf("-%s cannot be set from the configuration file", f.Name)
		}
	})
}

// TestConfigDocExample: the configuration file in docs/reference/
// controller.md reads without a mistake and sets every flag a file may.
func TestConfigDocExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "reference", "controller.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "### Configuration file")
	if start < 0 {
		t.Fatal("docs/reference/controller.md has no Configuration file section")
	}
	open := strings.Index(text[start:], "```hcl\n")
	if open < 0 {
		t.Fatal("no hcl block in the Configuration file section")
	}
	body := text[start+open+len("```hcl\n"):]
	body = body[:strings.Index(body, "```")]
	path := filepath.Join(t.TempDir(), "controller.hcl")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	values, _, diags := readControllerConfig(path)
	if diags.HasErrors() {
		t.Fatalf("the documented file does not read: %v", diags)
	}
	set := map[string]bool{}
	for _, v := range values {
		set[v.flag] = true
	}
	for block, attrs := range configSchema {
		for _, a := range attrs {
			if !set[a.flag] && a.name != "ca_path" {
				t.Errorf("the documented file leaves out %s %s", block, a.name)
			}
		}
	}
}
