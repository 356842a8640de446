package command

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/cli"
)

// TestReadNotifyEnvFile: -notify-env-file is read as Nomad reads the job's
// env template, values byte for byte; a name the job would skip is refused
// by name, and no error shows a value.
func TestReadNotifyEnvFile(t *testing.T) {
	cases := []struct {
		name, file string
		want       map[string]string
		err        string
	}{
		{name: "plain and quoted", file: "# the team's hook\nSTEWARD_HOOK_URL=https://hooks.example.com/x?a=b\nHOOK_AUTH=\"Bearer \\\"s3cr=t\\\" $HOME\"\nexport RAW='a\\nb'\n",
			want: map[string]string{"STEWARD_HOOK_URL": "https://hooks.example.com/x?a=b", "HOOK_AUTH": `Bearer "s3cr=t" $HOME`, "RAW": `a\nb`}},
		{name: "a newline escaped", file: "MULTI=\"one\\ntwo\"\n", want: map[string]string{"MULTI": "one\ntwo"}},
		{name: "a name the job would skip", file: "hook.auth=SECRETVALUE\n", err: `"hook.auth" is not an environment variable name`},
		{name: "Nomad's own", file: "NOMAD_ADDR=SECRETVALUE\n", err: "starts with NOMAD_"},
		{name: "a NUL", file: "HOOK=\"a\\u0000SECRETVALUE\"\n", err: "NUL byte"},
		{name: "not KEY=VALUE", file: "SECRETVALUE\n", err: "line 1"},
		{name: "nothing", file: "# empty\n", err: "no KEY=VALUE lines"},
		{name: "too large", file: "BIG=" + strings.Repeat("x", maxNotifyEnvFile) + "\n", err: "more than 65536 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "notify.env")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := readNotifyEnvFile(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "SECRETVALUE") {
					t.Errorf("the error shows a value: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("items %q, want %q", got, tc.want)
			}
		})
	}
}

// TestNotifyEnvNeeds: the variables a policy's notify blocks read that the
// secrets lack, each once.
func TestNotifyEnvNeeds(t *testing.T) {
	pol := `tier "batch" {
  priority = 30
}
notify "a" {
  url_env          = "HOOK_URL"
  headers_from_env = { Authorization = "HOOK_AUTH", "X-Team" = "TEAM" }
}
notify "b" {
  url_env = "HOOK_URL"
}
notify "c" {
  url = "https://hooks.example.com/c"
}
`
	for _, tc := range []struct {
		name  string
		items map[string]string
		want  []string
	}{
		{"all there", map[string]string{"HOOK_URL": "x", "HOOK_AUTH": "y", "TEAM": "z"}, nil},
		{"some lacking", map[string]string{"HOOK_URL": "x"}, []string{"HOOK_AUTH", "TEAM"}},
		{"none", map[string]string{}, []string{"HOOK_AUTH", "HOOK_URL", "TEAM"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := notifyEnvNeeds(pol, tc.items); !slices.Equal(got, tc.want) {
				t.Errorf("lacking %q, want %q", got, tc.want)
			}
		})
	}
}

// A -notify-env-file that cannot be stored stops setup before it talks to
// Nomad (nothing listens at the address given), without its values.
func TestSetupRefusesBadNotifyEnvFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify.env")
	if err := os.WriteFile(path, []byte("GOOD=SECRETVALUE\nbad.name=SECRETVALUE\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ui := cli.NewMockUi()
	code := (&OperatorSetupCommand{Meta: Meta{UI: ui}}).Run([]string{"-address", "http://127.0.0.1:1", "-notify-env-file", path})
	out := ui.ErrorWriter.String() + ui.OutputWriter.String()
	if code != setupError || !strings.Contains(out, `"bad.name" is not an environment variable name`) {
		t.Errorf("exit %d, output:\n%s\nwant exit 1 naming bad.name", code, out)
	}
	if strings.Contains(out, "SECRETVALUE") || strings.Contains(out, "127.0.0.1:1") {
		t.Errorf("setup printed a value or talked to Nomad:\n%s", out)
	}
}
