package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name    string
		path    string
		want    string
		wantErr string
	}{
		{name: "plain", path: write("plain", "abc"), want: "abc"},
		{name: "trailing newline", path: write("nl", "  abc\n"), want: "abc"},
		{name: "empty", path: write("empty", "\n"), wantErr: "is empty"},
		{name: "missing", path: filepath.Join(dir, "nope"), wantErr: "read token file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readTokenFile(tc.path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "abc") {
					t.Fatalf("the error shows the token: %v", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
