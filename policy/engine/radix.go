package engine

import (
	"cmp"
	"slices"
)

// radixSort sorts keys stably by key and returns them sorted, in keys or
// in tmp, and the other as spare; tmp must be as long as keys. It
// is the plan's one sort of packed integers: the victim keys (sortKeys),
// the demands by time (byTime) and by class (radixByCode). A least-
// significant-byte-first radix sort that passes only over the bytes in
// which some keys differ: a comparison sort of a fleet plan's 100,000 victim keys or
// 10,000 demands cost several times as much.
func radixSort(keys, tmp []candKey) (sorted, spare []candKey) {
	if len(keys) <= radixFrom {
		slices.SortStableFunc(keys, func(a, b candKey) int { return cmp.Compare(a.key, b.key) })
		return keys, tmp
	}
	and, or := ^uint64(0), uint64(0)
	for i := range keys {
		and &= keys[i].key
		or |= keys[i].key
	}
	varies := and ^ or
	for shift := uint(0); shift < 64; shift += 8 {
		if varies>>shift&0xff == 0 {
			continue // every key has the same byte here
		}
		var at [256]int32
		for i := range keys {
			at[byte(keys[i].key>>shift)]++
		}
		sum := int32(0)
		for d, n := range at {
			at[d], sum = sum, sum+n
		}
		for _, k := range keys {
			d := byte(k.key >> shift)
			tmp[at[d]] = k
			at[d]++
		}
		keys, tmp = tmp, keys
	}
	return keys, tmp
}

// radixFrom is the fewest keys radixSort sorts by radix: a pass clears
// and sums 256 counters, more than a simulator's plan of a few demands
// costs to sort by comparison.
const radixFrom = 64

// radixBuffers returns two of the scratch's key buffers at length n, for
// radixSort.
func (sc *scratch) radixBuffers(n int) (keys, tmp []candKey) {
	sc.radix[0], sc.radix[1] = grow(sc.radix[0], n), grow(sc.radix[1], n)
	return sc.radix[0], sc.radix[1]
}
