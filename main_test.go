package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

// Shell completion: with COMP_LINE set (as `complete -C steward steward`
// runs it), steward prints the subcommands and flags that complete the
// line, general options included.
func TestAutocomplete(t *testing.T) {
	t.Setenv("NOMAD_ADDR", "http://127.0.0.1:1") // job and namespace predictors find nothing
	cases := []struct {
		line string
		want []string
		not  []string
	}{
		{line: "steward qu", want: []string{"queue"}},
		{line: "steward st", want: []string{"status"}},
		{line: "steward queue -", want: []string{"-json", "-namespace", "-token", "-tls-skip-verify", "-no-color", "-verbose"}},
		{line: "steward controller -", want: []string{"-policy", "-token-file", "-address"}, not: []string{"-namespace"}},
		{line: "steward controller -log-level ", want: []string{"debug", "warn"}},
		{line: "steward plan -j", want: []string{"-json"}},
	}
	for _, tc := range cases {
		t.Run(tc.line, func(t *testing.T) {
			t.Setenv("COMP_LINE", tc.line)
			t.Setenv("COMP_POINT", "")
			out := captureStdout(t, func() {
				if code := run("steward", nil); code != 0 {
					t.Errorf("exit %d", code)
				}
			})
			words := strings.Fields(out)
			for _, w := range tc.want {
				if !contains(words, w) {
					t.Errorf("completions %v lack %s", words, w)
				}
			}
			for _, w := range tc.not {
				if contains(words, w) {
					t.Errorf("completions %v offer %s", words, w)
				}
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	f()
	os.Stdout = old
	w.Close()
	return <-done
}
