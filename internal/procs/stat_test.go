package procs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeProc writes a proc file system with one file per "pid/name" key.
func fakeProc(t *testing.T, files map[string]string) FS {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// statLine is a /proc/<pid>/stat line of a 6.x kernel: the command name,
// state, ppid, pgrp, utime 250, stime 50, start 123456, rss 300 pages.
func statLine(pid, comm, state string) string {
	return pid + " (" + comm + ") " + state + " 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 123456 1000000 300 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
}

func TestStat(t *testing.T) {
	want := Stat{Pid: 4242, PPid: 1, Pgid: 4242, State: 'S', User: 2500 * time.Millisecond,
		System: 500 * time.Millisecond, StartTicks: 123456, RSSBytes: 300 * pageSize}
	for _, tc := range []struct {
		name    string
		stat    string // "" writes no stat file
		want    Stat
		wantErr string
	}{
		{name: "plain", stat: statLine("4242", "sleep", "S"), want: want},
		// A task names its own processes (prctl): fields count from the
		// last ')', whatever the name holds.
		{name: "name with spaces and parentheses", stat: statLine("4242", "my (odd) cmd", "S"), want: want},
		{name: "name that forges fields", stat: statLine("4242", "x) Z 9 9", "S"), want: want},
		{name: "zombie", stat: statLine("4242", "sleep", "Z"), want: func() Stat { w := want; w.State = 'Z'; return w }()},
		{name: "gone", wantErr: ErrNoProcess.Error()},
		{name: "short line", stat: "4242 (x) S 1", wantErr: "reading /proc/4242/stat"},
		{name: "not numbers", stat: strings.Replace(statLine("4242", "x", "S"), " 250 ", " lots ", 1), wantErr: "reading /proc/4242/stat"},
		{name: "no command name", stat: "4242 x S 1 2 3\n", wantErr: "reading /proc/4242/stat"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"stat": "btime 1700000000\n"}
			if tc.stat != "" {
				files["4242/stat"] = tc.stat
			}
			got, err := fakeProc(t, files).Stat(4242)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Stat = %+v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Stat = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestStatGoneIsErrNoProcess(t *testing.T) {
	_, err := fakeProc(t, map[string]string{"stat": "btime 1\n"}).Stat(7)
	if !errors.Is(err, ErrNoProcess) {
		t.Fatalf("Stat of a missing process: %v, want ErrNoProcess", err)
	}
}

// Stats leaves out what does not parse, and reads the rest.
func TestStats(t *testing.T) {
	f := fakeProc(t, map[string]string{
		"10/stat":  statLine("10", "a", "S"),
		"11/stat":  "11 (b) S 1",
		"12/stat":  statLine("12", "c", "Z"),
		"self/x":   "", // not a pid
		"stat":     "btime 1\n",
		"13/other": "", // a pid without a stat: ended while listed
	})
	got, err := f.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, s := range got {
		pids = append(pids, s.Pid)
	}
	if len(pids) != 2 || pids[0]+pids[1] != 22 {
		t.Fatalf("Stats read pids %v, want 10 and 12", pids)
	}
}

func TestIDs(t *testing.T) {
	status := func(uid, gid string) string {
		return "Name:\tsleep\nState:\tS (sleeping)\nUid:\t" + uid + "\nGid:\t" + gid + "\nVmRSS:\t  1024 kB\n"
	}
	f := fakeProc(t, map[string]string{
		"10/status": status("1000\t1000\t1000\t1000", "1000\t1000\t1000\t1000"),
		"11/status": status("0\t70001\t0\t70001", "70002\t0\t0\t0"),
		"12/stat":   statLine("12", "no status", "S"),
		"stat":      "btime 1\n",
	})
	got, err := f.IDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint32{0, 1000, 70001, 70002} {
		if !got[id] {
			t.Errorf("IDs = %v, lacks %d", got, id)
		}
	}
	if len(got) != 4 {
		t.Errorf("IDs = %v, want 0, 1000, 70001, 70002", got)
	}
}

// The host's /proc reads this test's own process.
func TestReadStatSelf(t *testing.T) {
	st, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.Pid != os.Getpid() || st.PPid != os.Getppid() || !st.Running() || st.StartTicks == 0 || st.RSSBytes == 0 {
		t.Errorf("ReadStat(self) = %+v", st)
	}
}

func TestReadChars(t *testing.T) {
	for _, tc := range []struct {
		name    string
		io      string // "" writes no io file
		want    uint64
		wantErr string
	}{
		{name: "read bytes", io: "rchar: 4096\nwchar: 10\nsyscr: 3\nsyscw: 1\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n", want: 4096},
		{name: "malformed", io: "rchar: lots\n", wantErr: "reading /proc/5/io"},
		{name: "no io file", wantErr: "reading /proc/5/io"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"stat": "btime 1\n", "5/stat": statLine("5", "x", "S")}
			if tc.io != "" {
				files["5/io"] = tc.io
			}
			got, err := fakeProc(t, files).ReadChars(5)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ReadChars = %d, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ReadChars = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
