package engine

import "testing"

// TestStrTagPacksLengthAndLastBytes holds strTag to its packing (length
// above bit 32, the last four bytes big-endian below; shorter strings
// byte by byte, little-endian): tags order units and are compared
// across a plan, so a faster form must give the same values.
func TestStrTagPacksLengthAndLastBytes(t *testing.T) {
	for _, c := range []struct {
		name, s string
		want    uint64
	}{
		{"empty", "", 0},
		{"one byte", "a", 1<<32 | 'a'},
		{"three bytes, little-endian", "abc", 3<<32 | 'c'<<16 | 'b'<<8 | 'a'},
		{"four bytes, big-endian", "abcd", 4<<32 | 'a'<<24 | 'b'<<16 | 'c'<<8 | 'd'},
		{"longer: the last four", "team3", 5<<32 | 'e'<<24 | 'a'<<16 | 'm'<<8 | '3'},
		{"high bytes kept whole", "x\xff\xfe\xfd\xfc", 5<<32 | 0xff<<24 | 0xfe<<16 | 0xfd<<8 | 0xfc},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := strTag(c.s); got != c.want {
				t.Errorf("strTag(%q) = %#x, want %#x", c.s, got, c.want)
			}
		})
	}
}
