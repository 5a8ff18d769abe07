package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// allPlatforms are what scripts/release builds by default.
var allPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// scriptVersion is what scripts/version stamps (AX_VERSION, AX_COMMIT,
// AX_DATE).
func scriptVersion(t *testing.T, root string) map[string]string {
	t.Helper()
	out, err := exec.Command(filepath.Join(root, "scripts", "version")).Output()
	if err != nil {
		t.Fatalf("scripts/version: %v", err)
	}
	v := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, val, _ := strings.Cut(line, "=")
		v[k] = val
	}
	if v["AX_VERSION"] == "" || v["AX_COMMIT"] == "" || v["AX_DATE"] == "" {
		t.Fatalf("scripts/version printed %q", out)
	}
	return v
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := moduleRoot(goBinary())
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestReleaseBinaries runs scripts/release for this machine's platform
// (AX_RELEASE_ALL=1: all four; a cold build costs about 3 minutes per
// platform on 2 cores) and checks what a user downloads: SHA256SUMS
// matches every archive, each archive holds a static ax of its platform
// and the README, the version, commit and date are stamped, `ax version`
// says so, and a second build of the same commit is byte-identical.
func TestReleaseBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds release binaries (skipped with -short)")
	}
	t.Parallel()
	root := repoRoot(t)
	platforms := []string{runtime.GOOS + "/" + runtime.GOARCH}
	if os.Getenv("AX_RELEASE_ALL") == "1" {
		platforms = allPlatforms
	}
	want := scriptVersion(t, root)
	release := func(dir string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(root, "scripts", "release"), dir)
		cmd.Env = append(os.Environ(), "AX_RELEASE_PLATFORMS="+strings.Join(platforms, " "))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("scripts/release: %v\n%s", err, out)
		}
		t.Logf("scripts/release:\n%s", out)
	}
	dist := t.TempDir()
	release(dist)

	sums := map[string]string{}
	f, err := os.Open(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		sums[name] = sum
	}
	f.Close()
	if len(sums) != len(platforms) {
		t.Fatalf("SHA256SUMS lists %d archives, want %d: %v", len(sums), len(platforms), sums)
	}
	for _, p := range platforms {
		goos, goarch, _ := strings.Cut(p, "/")
		name := "ax_" + want["AX_VERSION"] + "_" + goos + "_" + goarch + ".tar.gz"
		data, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil {
			t.Fatalf("archive of %s: %v", p, err)
		}
		h := sha256.Sum256(data)
		if got := hex.EncodeToString(h[:]); sums[name] != got {
			t.Errorf("%s: SHA256SUMS says %s, the file is %s", name, sums[name], got)
		}
		files := untar(t, data)
		dir := strings.TrimSuffix(name, ".tar.gz") + "/"
		bin, readme := files[dir+"ax"], files[dir+"README.md"]
		if bin == nil || readme == nil || len(files) != 2 {
			t.Fatalf("%s holds %v, want %sax and %sREADME.md", name, keys(files), dir, dir)
		}
		checkBinary(t, p, bin)
		for _, k := range []string{"AX_VERSION", "AX_COMMIT", "AX_DATE"} {
			if !bytes.Contains(bin, []byte(want[k])) {
				t.Errorf("%s: %s %s is not stamped in ax", p, k, want[k])
			}
		}
		if p != runtime.GOOS+"/"+runtime.GOARCH {
			continue
		}
		exe := filepath.Join(t.TempDir(), "ax")
		if err := os.WriteFile(exe, bin, 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(exe, "version", "-o", "json").Output()
		if err != nil {
			t.Fatalf("ax version: %v", err)
		}
		var v struct{ Version, Commit, Date string }
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatal(err)
		}
		if v.Version != want["AX_VERSION"] || v.Commit != want["AX_COMMIT"] || v.Date != want["AX_DATE"] {
			t.Errorf("ax version -o json says %s, scripts/version %v", out, want)
		}
		// The same commit builds the same bytes.
		again := t.TempDir()
		release(again)
		if data2, err := os.ReadFile(filepath.Join(again, name)); err != nil || !bytes.Equal(data, data2) {
			t.Errorf("a second release of the same commit differs (%v)", err)
		}
	}
}

func untar(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d, want 0:0", h.Name, h.Uid, h.Gid)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// checkBinary checks that bin is an executable of platform, and static on
// Linux (no interpreter: it runs on an image without libc).
func checkBinary(t *testing.T, platform string, bin []byte) {
	t.Helper()
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	cpus := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}
	goos, goarch, _ := strings.Cut(platform, "/")
	switch goos {
	case "linux":
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("%s: not ELF: %v", platform, err)
		}
		if f.Machine != machines[goarch] || f.Type != elf.ET_EXEC {
			t.Errorf("%s: ELF machine %v type %v", platform, f.Machine, f.Type)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s: dynamically linked (has an interpreter)", platform)
			}
		}
	case "darwin":
		f, err := macho.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("%s: not Mach-O: %v", platform, err)
		}
		if f.Cpu != cpus[goarch] || f.Type != macho.TypeExec {
			t.Errorf("%s: Mach-O cpu %v type %v", platform, f.Cpu, f.Type)
		}
	default:
		t.Fatalf("no check for %s", platform)
	}
}
