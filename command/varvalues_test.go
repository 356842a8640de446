package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVariableValues(t *testing.T) {
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := file("base.hcl", "driver = \"exec\"\ncount  = 2\ntags   = [\"a\", \"b\"]\n")
	over := file("over.hcl", "count = 3\n")
	block := file("block.hcl", "job \"x\" {}\n")
	bad := file("bad.hcl", "count = \n")
	cases := []struct {
		name    string
		vars    []string
		files   []string
		want    string // the whole output
		wantErr string
	}{
		{"a file alone", nil, []string{base}, "driver = \"exec\"\ncount = 2\ntags = [\"a\", \"b\"]\n", ""},
		{"a later file wins", nil, []string{base, over}, "driver = \"exec\"\ncount = 3\ntags = [\"a\", \"b\"]\n", ""},
		{"-var wins over a file", []string{"count=1", "pprof=true"}, []string{base}, "driver = \"exec\"\ncount = \"1\"\ntags = [\"a\", \"b\"]\npprof = \"true\"\n", ""},
		{"the later -var wins", []string{"pprof=true", "pprof=false"}, nil, "pprof = \"false\"\n", ""},
		{"a -var value is literal", []string{"image=${evil}:%{x}"}, nil, "image = \"$${evil}:%%{x}\"\n", ""},
		{"a -var without a value", []string{"count"}, nil, "", `-var "count": want KEY=VALUE`},
		{"a block in a var file", nil, []string{block}, "", "block.hcl:1,1"},
		{"a var file that does not parse", nil, []string{bad}, "", "bad.hcl:1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := variableValues(tc.vars, tc.files)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}
