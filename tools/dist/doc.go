// Package dist holds the checks of what Steward ships: NOTICE names every
// module linked into the binaries with its licence (notice_test.go), the
// plugin binaries stay slim, `make dist` makes archives that verify
// against their signed SHA256SUMS and install-plugins.sh installs only what
// verifies (dist_test.go), sign.sh signs with the key a maintainer names
// (sign_test.go), and VERSION, CHANGELOG.md and make agree
// (version_test.go). dist.sh builds the archives.
package dist
