//go:build unix

package e2e

import (
	"fmt"
	"io/fs"
	"syscall"
)

// fileOwner is "uid:gid" of a file.
func fileOwner(info fs.FileInfo) string {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
	}
	return "?"
}
