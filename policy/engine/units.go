package engine

import (
	"math"
	"strconv"
	"strings"
)

// Reserves and limits count GPUs; a MIG instance is a fraction of one (a
// 1g slice of an A100 is 1/7). The engine places devices (a node's free
// count, a demand's GPUs per allocation, are devices) but keeps what each
// tenant holds, has set aside and is entitled to in units of 1/gpuUnit GPU,
// so that fractions add up exactly: 840 is divisible by every slice count
// MIG has (7 on A100 and H100, 4 on A30) and by 2 to 8.
const gpuUnit = 840

// unitsOf is the units of a device of share s (Node.Share; 0 is 1).
func unitsOf(s float64) int {
	if s <= 0 || s >= 1 || math.IsNaN(s) {
		return gpuUnit
	}
	return max(1, int(math.Round(s*gpuUnit)))
}

// ShareOf is the part of a whole GPU a device of this name is (Node.Share):
// for a MIG instance, its profile's compute slices over its GPU's ("NVIDIA
// A100-SXM4-40GB MIG 3g.20gb": 3 of 7; an A30's: of 4); 0, a whole GPU, for
// any other name.
func ShareOf(name string) float64 {
	_, profile, ok := strings.Cut(name, " MIG ")
	if !ok {
		return 0
	}
	g, _, ok := strings.Cut(profile, "g.")
	slices, err := strconv.Atoi(g)
	if !ok || err != nil || slices < 1 {
		return 0
	}
	total := 7 // A100, H100, H200, B200: 7 compute slices
	if strings.Contains(name, "A30") {
		total = 4
	}
	if slices >= total {
		return 0
	}
	return float64(slices) / float64(total)
}

// unitsOn is the units of one device of node n.
func (pl *placement) unitsOn(n int32) int {
	if pl.whole {
		return gpuUnit
	}
	return pl.classUnits[pl.cellClass[pl.cellOf[n]]]
}

// setUnits is the most units a device of set s is: what an allocation's
// GPUs count for before the node is chosen. A demand that may go on whole
// GPUs or on MIG instances is counted as whole GPUs, so that a limit is
// never passed and a reserve never claimed by the smaller guess.
func (pl *placement) setUnits(s int32) int {
	if pl.whole {
		return gpuUnit
	}
	most := 0
	for cell, in := range pl.in[s] {
		if in {
			most = max(most, pl.classUnits[pl.cellClass[cell]])
		}
	}
	if most == 0 {
		return gpuUnit
	}
	return most
}

// unitsOfUnit is what a unit's GPUs count for, over its nodes.
func (c *cluster) unitsOfUnit(u *unit) int {
	if c.pl.whole {
		return u.gpus * gpuUnit
	}
	total := 0
	c.nodesOf(u, func(n int32, g int) { total += g * c.pl.unitsOn(n) })
	return total
}

// gpusOfUnits is units as whole GPUs, rounded up (TenantUsage).
func gpusOfUnits(u int) int { return (u + gpuUnit - 1) / gpuUnit }

// appendUnits writes units as GPUs: "3", "3/7", "1 2/7".
func appendUnits(b []byte, u int) []byte {
	if u < 0 {
		b = append(b, '-')
		u = -u
	}
	whole, frac := u/gpuUnit, u%gpuUnit
	if frac == 0 {
		return strconv.AppendInt(b, int64(whole), 10)
	}
	if whole > 0 {
		b = strconv.AppendInt(b, int64(whole), 10)
		b = append(b, ' ')
	}
	d := gcd(frac, gpuUnit)
	b = strconv.AppendInt(b, int64(frac/d), 10)
	b = append(b, '/')
	return strconv.AppendInt(b, int64(gpuUnit/d), 10)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// u appends units as a number of GPUs: "3", "2 3/7".
//
//go:noinline
func (m *msg) u(units int) *msg {
	m.b = appendUnits(m.b, units)
	return m
}

// gpusU appends units with the noun: "1 GPU", "3 GPUs", "3/7 GPU",
// "1 2/7 GPUs".
//
//go:noinline
func (m *msg) gpusU(units int) *msg {
	m.u(units)
	if units > 0 && units <= gpuUnit {
		return m.s(" GPU")
	}
	return m.s(" GPUs")
}

// unitsString is units as a number of GPUs, for fmt-built reasons.
func unitsString(units int) string { return string(appendUnits(nil, units)) }
