//go:build tools

// Package tools keeps build-time dependencies in go.mod: the Nomad agent
// itself, which `make nomad` builds from the pinned module for the
// acceptance tests and the demo.
package tools

import (
	_ "github.com/hashicorp/nomad"
)
