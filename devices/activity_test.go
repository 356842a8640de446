package devices

import (
	"math"
	"strings"
	"testing"
)

func TestParseSimActivity(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want SimActivity
		ok   bool
	}{
		{"whole percent", "80", SimActivity{Util: 80}, true},
		{"spaces and newline", " 80\n", SimActivity{Util: 80}, true},
		{"with memory", "80 1024", SimActivity{Util: 80, MemMiB: 1024}, true},
		{"decimals kept", "37.5 2", SimActivity{Util: 37.5, MemMiB: 2}, true},
		{"negative clamped", "-3", SimActivity{Util: 0}, true},
		{"over 100 clamped", "101", SimActivity{Util: 100}, true},
		{"infinity clamped", "+Inf", SimActivity{Util: 100}, true},
		{"extra fields ignored", "50 10 junk", SimActivity{Util: 50, MemMiB: 10}, true},
		{"empty", "", SimActivity{}, false},
		{"blank", " \n\t", SimActivity{}, false},
		{"NaN", "NaN", SimActivity{}, false},
		{"not a number", "x", SimActivity{}, false},
		{"memory not a number", "80 lots", SimActivity{}, false},
		{"negative memory", "80 -1", SimActivity{}, false},
		{"memory with decimals", "80 1.5", SimActivity{}, false},
		{"percent sign", "80%", SimActivity{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseSimActivity([]byte(tc.in))
			if ok != tc.ok || got != tc.want {
				t.Errorf("ParseSimActivity(%q) = %+v, %t; want %+v, %t", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// FuzzParseSimActivity: a tenant's task writes activity files, so the
// parser must take anything without panicking, and what it accepts is a
// utilisation within 0..100 that reads back the same.
func FuzzParseSimActivity(f *testing.F) {
	for _, s := range []string{"80", "80 1024", " 0.5\n", "", "NaN", "1e400 7", "-0", "80 lots", "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		act, ok := ParseSimActivity(raw)
		if !ok {
			if act != (SimActivity{}) {
				t.Fatalf("ParseSimActivity(%q) refused the content but returned %+v", raw, act)
			}
			return
		}
		if math.IsNaN(act.Util) || act.Util < 0 || act.Util > 100 {
			t.Fatalf("ParseSimActivity(%q): utilisation %v outside 0..100", raw, act.Util)
		}
		if len(strings.Fields(string(raw))) == 0 {
			t.Fatalf("ParseSimActivity(%q) accepted a blank file", raw)
		}
		// The plugin's rounding keeps it within the percent it reports.
		if a, ok := parseActivity(raw); !ok || a.util > 100 || a.memUsed != act.MemMiB {
			t.Fatalf("parseActivity(%q) = %+v, %t; want the same reading as ParseSimActivity's %+v", raw, a, ok, act)
		}
	})
}
