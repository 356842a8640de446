package policy

import (
	"fmt"
	"strings"
)

// closest returns the candidate nearest to s by edit distance when it is near
// enough to be a likely typo, or "" when none is. Ties go to the earlier
// candidate, so callers pass candidates in a stable order.
func closest(s string, candidates []string) string {
	n := len([]rune(s))
	allowed := max(1, n/3)
	best, bestDist := "", -1
	for _, c := range candidates {
		if abs(len([]rune(c))-n) > allowed {
			continue // the distance is at least the difference in length
		}
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	// Allow about one edit per three characters: "traning" finds "training",
	// while "gpu" does not find "cpu-batch". A suggestion that shares
	// nothing with s ("a" for "c") is no help.
	if bestDist < 0 || bestDist > allowed || bestDist >= n {
		return ""
	}
	return best
}

// didYouMean is the sentence a diagnostic appends for a suggestion, or "".
func didYouMean(s string, candidates []string) string {
	if c := closest(s, candidates); c != "" && c != s {
		return fmt.Sprintf(" Did you mean %q?", c)
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
