package engine

import (
	"cmp"
	"math/rand/v2"
	"testing"
)

// packedKey is a candidate's key with the unit index in its low bits: the
// order sortKeys gives (by key, then unit index).
func packedKey(f *victimFacts) uint64 { return victimKey(f) | uint64(f.ui) }

func sign(x int) int { return cmp.Compare(x, 0) }

// The table is laid out as the packed key needs: numbered from 1, bits
// adding up to 64, the unit index last in the free bits, the risk's bits
// holding maxRisk.
func TestVictimOrderLayout(t *testing.T) {
	var total uint
	for i, c := range victimOrder {
		if c.num != i+1 {
			t.Errorf("criterion %q is number %d at place %d", c.name, c.num, i+1)
		}
		if c.name == "" || c.why == "" || c.compare == nil || c.rank == nil || c.show == nil || c.bits == 0 {
			t.Errorf("criterion %d (%q) is incomplete", c.num, c.name)
		}
		total += c.bits
	}
	if total != 64 {
		t.Errorf("the criteria take %d bits, want 64", total)
	}
	if last := victimOrder[len(victimOrder)-1]; last.name != "unit index" || last.bits != keyFreeBits {
		t.Errorf("last criterion %q of %d bits, want the unit index in %d", last.name, last.bits, keyFreeBits)
	}
	if maxRisk>>riskBits != 0 || maxRisk+1 != 1<<riskBits {
		t.Errorf("maxRisk %d does not fill %d bits", uint64(maxRisk), riskBits)
	}
	for class := classIdle; class <= classYoung; class++ {
		if classNames[class] == "" {
			t.Errorf("class %d has no name", class)
		}
	}
}

// genFacts draws a candidate over the whole domain the key encodes,
// favouring the ends and a few middle values, so that pairs tie often on
// the first criteria and the later ones get to decide.
func genFacts(r *rand.Rand) victimFacts {
	pick := func(vals ...uint64) uint64 { return vals[r.IntN(len(vals))] }
	f := victimFacts{
		class:  r.IntN(classYoung + 1),
		within: r.IntN(2) == 1,
		prio:   int(pick(0, 1, 40, 41, 100, 127, uint64(r.IntN(128)))),
		gang:   r.IntN(2) == 1,
		risk:   pick(0, 1, 3600, 3601, maxRisk-1, maxRisk, r.Uint64N(maxRisk+1)),
		ui:     int32(pick(0, 1, 2, 1<<keyFreeBits-1, r.Uint64N(1<<keyFreeBits))),
	}
	return f
}

// victimKey, written out for speed, is the key the table lays out: each
// criterion but the unit index, through the table's rank, in its bits,
// the first highest.
func TestVictimKeyFromTable(t *testing.T) {
	r := rand.New(rand.NewPCG(32, 1))
	for i := 0; i < 100000; i++ {
		f := genFacts(r)
		var want uint64
		for _, c := range victimOrder {
			want = want<<c.bits | c.rank(&f)&(1<<c.bits-1)
		}
		if want &^= 1<<keyFreeBits - 1; victimKey(&f) != want {
			t.Fatalf("%+v: victimKey %#x, the table's key %#x", f, victimKey(&f), want)
		}
	}
}

// The packed key orders any two candidates as compareVictims does, and
// compareVictims is antisymmetric: the key and the criteria cannot drift.
func TestVictimKeyOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(32, 2))
	decided := map[string]int{}
	for i := 0; i < 200000; i++ {
		a, b := genFacts(r), genFacts(r)
		if r.IntN(4) == 0 {
			b = a // then vary one criterion's fact, or none
			switch r.IntN(7) {
			case 0:
				b.class = r.IntN(classYoung + 1)
			case 1:
				b.within = !a.within
			case 2:
				b.prio = r.IntN(128)
			case 3:
				b.gang = !a.gang
			case 4:
				b.risk = r.Uint64N(maxRisk + 1)
			case 5:
				b.ui = int32(r.Uint64N(1 << keyFreeBits))
			}
		}
		got, by := compareVictims(&a, &b)
		want := cmp.Compare(packedKey(&a), packedKey(&b))
		if sign(got) != want {
			t.Fatalf("compareVictims(%+v, %+v) = %d (by %v), key order %d", a, b, got, by, want)
		}
		back, byBack := compareVictims(&b, &a)
		if sign(back) != -sign(got) || byBack != by {
			t.Fatalf("compareVictims is not antisymmetric on %+v, %+v", a, b)
		}
		if by != nil {
			decided[by.name]++
		}
	}
	for _, c := range victimOrder {
		if decided[c.name] == 0 {
			t.Errorf("criterion %d (%s) never decided: the generator does not reach it", c.num, c.name)
		}
	}
}

// One case per criterion: the first that differs decides, whatever the
// later ones say, and the key agrees.
func TestCompareVictims(t *testing.T) {
	base := victimFacts{class: classOther, within: false, prio: 40, gang: false, risk: 600, ui: 5}
	with := func(change func(f *victimFacts)) victimFacts {
		f := base
		change(&f)
		return f
	}
	cases := []struct {
		name string
		a, b victimFacts // a is given up first
		by   string
	}{
		{
			name: "idle work before backfill of a lower tier with less at risk",
			a:    with(func(f *victimFacts) { f.class = classIdle; f.prio = 60; f.risk = 9000 }),
			b:    with(func(f *victimFacts) { f.class = classBackfill; f.prio = 10; f.risk = 1 }),
			by:   "class",
		},
		{
			name: "work past min_runtime before younger work of a lower tier",
			a:    with(func(f *victimFacts) { f.prio = 60 }),
			b:    with(func(f *victimFacts) { f.class = classYoung; f.prio = 10 }),
			by:   "class",
		},
		{
			name: "a tenant over its reservation before one within it at a lower priority",
			a:    with(func(f *victimFacts) { f.prio = 60; f.ui = 9 }),
			b:    with(func(f *victimFacts) { f.within = true; f.prio = 10; f.ui = 1 }),
			by:   "reservation",
		},
		{
			name: "the lower priority before a single allocation with less at risk",
			a:    with(func(f *victimFacts) { f.prio = 10; f.gang = true; f.risk = 9000 }),
			b:    with(func(f *victimFacts) { f.prio = 40; f.risk = 1 }),
			by:   "priority",
		},
		{
			name: "a single allocation before a gang with less at risk",
			a:    with(func(f *victimFacts) { f.risk = 9000 }),
			b:    with(func(f *victimFacts) { f.gang = true; f.risk = 1 }),
			by:   "gang",
		},
		{
			name: "less progress at risk before more: checkpointed 10 minutes ago before 1 hour",
			a:    with(func(f *victimFacts) { f.risk = 600; f.ui = 9 }),
			b:    with(func(f *victimFacts) { f.risk = 3600; f.ui = 1 }),
			by:   "progress at risk",
		},
		{
			name: "risks beyond maxRisk tie: the unit index decides",
			a:    with(func(f *victimFacts) { f.risk = maxRisk; f.ui = 1 }),
			b:    with(func(f *victimFacts) { f.risk = maxRisk; f.ui = 2 }),
			by:   "unit index",
		},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			got, by := compareVictims(&tt.a, &tt.b)
			if got >= 0 || by == nil || by.name != tt.by {
				t.Fatalf("compareVictims = %d by %v, want a first by %q", got, by, tt.by)
			}
			if packedKey(&tt.a) >= packedKey(&tt.b) {
				t.Errorf("key %#x not below %#x", packedKey(&tt.a), packedKey(&tt.b))
			}
			if by.show(&tt.a) == by.show(&tt.b) {
				t.Errorf("%s shows both as %q", by.name, by.show(&tt.a))
			}
		})
	}
	if got, by := compareVictims(&base, &base); got != 0 || by != nil {
		t.Errorf("a unit against itself: %d by %v, want 0 by none", got, by)
	}
}

// A segment's bounds are keys of the victim order: every candidate of a
// segment at a priority lies between segKey(seg, prio) and the next
// segment's first key.
func TestSegKeyBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(32, 3))
	segOf := func(f *victimFacts) int {
		switch f.class {
		case classIdle:
			return segIdle
		case classBackfill:
			return segBackfill
		case classOther:
			return segOver + int(bit(f.within))
		}
		return segYoungOver + int(bit(f.within))
	}
	for i := 0; i < 20000; i++ {
		f := genFacts(r)
		if f.class < classOther {
			f.within = false // as victimFacts builds them
		}
		s, k := segOf(&f), victimKey(&f)
		if lo, hi := segKey(s, f.prio), segKey(s+1, 0); k < lo || k >= hi {
			t.Fatalf("%+v: key %#x outside segment %d at priority %d [%#x, %#x)", f, k, s, f.prio, lo, hi)
		}
		if f.prio < 127 && k >= segKey(s, f.prio+1) {
			t.Fatalf("%+v: key %#x not below priority %d's first key", f, k, f.prio+1)
		}
	}
}
