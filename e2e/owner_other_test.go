//go:build !unix

package e2e

import "io/fs"

// fileOwner is "?" where files have no Unix owner.
func fileOwner(fs.FileInfo) string { return "?" }
