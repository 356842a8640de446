package controller

import (
	"os"
	"strings"
	"testing"

	"github.com/gpu-steward/steward/policy"
)

// TestCheckNotifyEnvSkippedHint: a variable the policy needs that is not
// set is an error naming it; when the controller job skipped items of its
// notify secrets variable, the error lists them too (the likely cause: an
// item named hook-auth for HOOK_AUTH).
func TestCheckNotifyEnvSkippedHint(t *testing.T) {
	pol := &policy.Policy{Notify: []*policy.Notify{{Name: "ops", URL: "https://hooks.example.com/x",
		HeadersFromEnv: map[string]string{"Authorization": "STEWARD_TEST_HOOK_AUTH"}}}}
	cases := []struct {
		name    string
		env     map[string]string
		wantErr []string // substrings; none: no error
		notErr  []string
	}{
		{name: "set: no error", env: map[string]string{"STEWARD_TEST_HOOK_AUTH": "Bearer x", NotifyEnvSkipped: `"hook-auth"`}},
		{name: "not set, nothing skipped", env: map[string]string{},
			wantErr: []string{`notify "ops": headers_from_env Authorization: STEWARD_TEST_HOOK_AUTH is not set`},
			notErr:  []string{"skipped"}},
		{name: "not set, items skipped: named", env: map[string]string{NotifyEnvSkipped: `"hook-auth" "NOMAD_ADDR"`},
			wantErr: []string{"STEWARD_TEST_HOOK_AUTH is not set", `skipped items of its Nomad variable`, `"hook-auth" "NOMAD_ADDR"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("STEWARD_TEST_HOOK_AUTH", "")
			t.Setenv(NotifyEnvSkipped, "")
			for _, k := range []string{"STEWARD_TEST_HOOK_AUTH", NotifyEnvSkipped} {
				if v, ok := tc.env[k]; ok {
					t.Setenv(k, v)
				} else {
					unsetenv(t, k)
				}
			}
			err := checkNotifyEnv(pol)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			for _, w := range tc.notErr {
				if strings.Contains(err.Error(), w) {
					t.Errorf("error %q has %q", err, w)
				}
			}
		})
	}
}

// unsetenv unsets k for the test (t.Setenv first, so that it is restored).
func unsetenv(t *testing.T, k string) {
	t.Helper()
	t.Setenv(k, "")
	if err := os.Unsetenv(k); err != nil {
		t.Fatal(err)
	}
}

// TestCheckNotifyEnvItem: the items the controller job passes, and those
// it skips, as its template decides (jobs TestControllerNotifyEnvTemplate
// renders the same stories).
func TestCheckNotifyEnvItem(t *testing.T) {
	cases := []struct {
		name, item, value string
		why               string // "": passed
	}{
		{"upper", "STEWARD_HOOK_URL", "https://x", ""},
		{"lower and digits", "_hook9", "a=b$c\"\\\n", ""},
		{"NOMAD without the underscore", "NOMADIC", "", ""},
		{"a dash", "hook-auth", "x", "not an environment variable name"},
		{"a dot", "hook.url", "x", "not an environment variable name"},
		{"a leading digit", "9LIVES", "x", "not an environment variable name"},
		{"empty", "", "x", "not an environment variable name"},
		{"a space", "A B", "x", "not an environment variable name"},
		{"not ASCII", "HÖÖK", "x", "not an environment variable name"},
		{"Nomad's", "NOMAD_ADDR", "http://evil", "starts with NOMAD_"},
		{"the skipped list", NotifyEnvSkipped, "", "the controller job's own"},
		{"a NUL", "HOOK", "a\x00b", "NUL byte"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckNotifyEnvItem(tc.item, tc.value)
			switch {
			case tc.why == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.why != "" && (err == nil || !strings.Contains(err.Error(), tc.why)):
				t.Errorf("error %v, want %q", err, tc.why)
			}
		})
	}
}
