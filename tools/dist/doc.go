// Package dist holds the checks of what Steward ships: NOTICE names every
// module linked into the binaries with its licence (notice_test.go), the
// plugin binaries stay slim, and `make dist` makes archives that verify
// against their SHA256SUMS (dist_test.go). dist.sh builds the archives.
package dist
