package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	writeMode := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		// Whatever the umask.
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write := func(name, content string) string { return writeMode(name, content, 0o600) }
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
		{name: "owner read-only", path: writeMode("ro", "abc", 0o400), want: "abc"},
		// Nomad's own fallback for a task without a user: 0666, 0644
		// after the umask. Another task on the node could read it.
		{name: "world-readable token refused", path: writeMode("world", "abc", 0o644),
			wantErr: "has mode 0644: its group or other users may read or change it"},
		{name: "group-readable token refused", path: writeMode("group", "abc", 0o640), wantErr: "has mode 0640"},
		{name: "world-writable token refused", path: writeMode("ww", "abc", 0o602), wantErr: "has mode 0602"},
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
