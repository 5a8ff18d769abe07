package e2e

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// imageStore runs buildah and podman on a storage of the test's own (vfs:
// no overlay mounts), so the test neither needs nor touches the system's
// images.
type imageStore struct {
	dir string
}

func (s imageStore) args() []string {
	return []string{"--root", filepath.Join(s.dir, "root"), "--runroot", filepath.Join(s.dir, "run"), "--storage-driver", "vfs"}
}

func (s imageStore) buildah(args ...string) ([]byte, error) {
	return exec.Command("buildah", append(s.args(), args...)...).CombinedOutput()
}

// TestImages runs scripts/image (buildah from scratch, no base image
// pulled) and checks both images: tagged with the version, the size
// printed, a non-root user, no shell, CA certificates, a static binary.
// Where containers can run (podman, else buildah run with chroot
// isolation), it starts them: ax version, ax dev to the end of the demo,
// and, with podman, a stack of the two images (nats-server, an
// orchestrator and a worker) that runs a submitted task. It skips,
// saying why, when buildah is missing and cannot be installed, or cannot
// run on the machine.
func TestImages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds container images (skipped with -short)")
	}
	t.Parallel()
	root := repoRoot(t)
	if _, err := exec.LookPath("buildah"); err != nil && os.Geteuid() != 0 {
		t.Skip("buildah is not installed and this is not root: apt-get install buildah (scripts/image installs it as root)")
	}
	store := imageStore{dir: t.TempDir()}
	if _, err := exec.LookPath("buildah"); err == nil {
		// Can buildah work here at all (storage, privileges)?
		out, err := store.buildah("from", "scratch")
		if err != nil {
			t.Skipf("buildah cannot build on this machine: %v\n%s", err, out)
		}
		_, _ = store.buildah("rm", strings.TrimSpace(string(out)))
	}

	archives := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "scripts", "image"), "--archive", archives)
	cmd.Env = append(os.Environ(), "AX_IMAGE_STORE="+store.dir)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/image: %v\n%s", err, out)
	}
	t.Logf("scripts/image (%s):\n%s", time.Since(start).Round(time.Second), out)

	v := scriptVersion(t, root)
	natsVersion := goModVersion(t, root, "github.com/nats-io/nats-server/v2")
	// A tag cannot hold "+" (a +dirty version): scripts/image writes "-".
	axImage, natsImage := "localhost/ax:"+strings.ReplaceAll(v["AX_VERSION"], "+", "-"), "localhost/ax-nats-server:"+natsVersion
	for _, img := range []string{axImage, natsImage} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(img) + `\s+\d+(\.\d+)? [kMG]?B$`).Match(out) {
			t.Errorf("scripts/image printed no size for %s", img)
		}
		base := filepath.Base(strings.Replace(img, ":", "-", 1))
		if fi, err := os.Stat(filepath.Join(archives, base+"-"+goArch(t)+".tar")); err != nil || fi.Size() < 1<<20 {
			t.Errorf("archive of %s: %v", img, err)
		}
	}
	checkImage(t, store, axImage, "/usr/local/bin/ax", "/var/lib/ax", []string{"/usr/local/bin/ax"})
	checkImage(t, store, natsImage, "/usr/local/bin/nats-server", "/var/lib/nats", []string{"/usr/local/bin/nats-server"})
	for _, latest := range []string{"localhost/ax:latest", "localhost/ax-nats-server:latest"} {
		if out, err := store.buildah("inspect", "--type", "image", latest); err != nil {
			t.Errorf("%s: %v\n%s", latest, err, out)
		}
	}

	t.Run("run", func(t *testing.T) {
		r := findRunner(t, store, axImage)
		var got struct {
			Version, Commit, Date string
			NATSServer            string `json:"nats_server"`
		}
		vout, err := r.run(axImage, "version", "-o", "json")
		if err != nil {
			t.Fatalf("ax version in %s: %v\n%s", r, err, vout)
		}
		if err := json.Unmarshal(vout, &got); err != nil {
			t.Fatalf("ax version -o json: %v\n%s", err, vout)
		}
		if got.Version != v["AX_VERSION"] || got.Commit != v["AX_COMMIT"] || got.Date != v["AX_DATE"] || got.NATSServer != natsVersion {
			t.Errorf("ax version in the image says %s; want %v and nats-server %s", vout, v, natsVersion)
		}
		dout, err := r.run(axImage, "dev", "--exit", "--port", "0", "--console-addr", "off", "--metrics-addr", "off")
		if err != nil || !bytes.Contains(dout, []byte("All 34 tasks ended")) {
			t.Fatalf("ax dev in %s: %v\n%s", r, err, dout)
		}
		t.Logf("ax version and ax dev ran in the image (%s)", r)
		if r.podman == nil {
			t.Logf("the two-image stack needs podman (%s runs one process, not a network of containers)", r)
			return
		}
		nout, err := r.run(natsImage, "--version")
		if err != nil || !strings.Contains(string(nout), strings.TrimPrefix(natsVersion, "v")) {
			t.Fatalf("nats-server --version in its image: %v\n%s", err, nout)
		}
		// A stack in one network namespace: nats-server, an orchestrator
		// and a worker, each from its image; a task submitted from a
		// fourth container runs to success.
		name := fmt.Sprintf("ax-e2e-%d", time.Now().UnixNano())
		nats := r.start(t, name+"-nats", "none", natsImage)
		r.start(t, name+"-orchestrator", "container:"+nats, axImage, "orchestrator", "--metrics-addr", "127.0.0.1:9464")
		r.start(t, name+"-worker", "container:"+nats, axImage, "worker", "--metrics-addr", "127.0.0.1:9465")
		deadline := time.Now().Add(2 * time.Minute)
		for _, port := range []string{"9464", "9465"} {
			for {
				hout, err := r.runIn("container:"+nats, axImage, "healthcheck", "http://127.0.0.1:"+port+"/readyz")
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("readiness on :%s in the stack: %v\n%s\n%s", port, err, hout, r.logs(name))
				}
				time.Sleep(500 * time.Millisecond)
			}
		}
		sout, err := r.runIn("container:"+nats, axImage, "submit", "demo.noop", "--wait")
		if err != nil || !bytes.Contains(sout, []byte("succeeded")) {
			t.Fatalf("ax submit --wait in the stack: %v\n%s\n%s", err, sout, r.logs(name))
		}
		t.Logf("stack of images (nats-server, orchestrator, worker) ran a task: %s", bytes.TrimSpace(sout))
	})
}

// checkImage checks an image's configuration and its whole file tree.
func checkImage(t *testing.T, s imageStore, image, entrypoint, dataDir string, bins []string) {
	t.Helper()
	out, err := s.buildah("inspect", "--type", "image", image)
	if err != nil {
		t.Fatalf("inspect %s: %v\n%s", image, err, out)
	}
	var info struct {
		OCIv1 struct {
			Config struct {
				User       string
				Entrypoint []string
				WorkingDir string
			} `json:"config"`
			Architecture string `json:"architecture"`
			OS           string `json:"os"`
		}
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("inspect %s: %v", image, err)
	}
	c := info.OCIv1.Config
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{entrypoint}) || c.WorkingDir != dataDir ||
		info.OCIv1.OS != "linux" || info.OCIv1.Architecture != goArch(t) {
		t.Errorf("%s: config %+v, %s/%s", image, c, info.OCIv1.OS, info.OCIv1.Architecture)
	}
	ctr, err := s.buildah("from", image)
	if err != nil {
		t.Fatalf("buildah from %s: %v\n%s", image, err, ctr)
	}
	id := strings.TrimSpace(string(ctr))
	defer s.buildah("rm", id)
	mnt, err := s.buildah("mount", id)
	if err != nil {
		t.Fatalf("buildah mount: %v\n%s", err, mnt)
	}
	dir := strings.TrimSpace(string(mnt))
	var tree []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		tree = append(tree, strings.TrimPrefix(p, dir)+" "+info.Mode().String()+" "+fileOwner(info))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/etc drwxr-xr-x 0:0", "/etc/group -rw-r--r-- 0:0", "/etc/passwd -rw-r--r-- 0:0",
		"/etc/ssl drwxr-xr-x 0:0", "/etc/ssl/certs drwxr-xr-x 0:0", "/etc/ssl/certs/ca-certificates.crt -rw-r--r-- 0:0",
		"/home drwxr-xr-x 0:0", "/home/ax drwxr-xr-x 65532:65532", "/tmp dtrwxrwxrwx 0:0",
		"/usr drwxr-xr-x 0:0", "/usr/local drwxr-xr-x 0:0", "/usr/local/bin drwxr-xr-x 0:0",
		"/var drwxr-xr-x 0:0", "/var/lib drwxr-xr-x 0:0", dataDir + " drwxr-xr-x 65532:65532",
	}
	for _, b := range bins {
		want = append(want, b+" -rwxr-xr-x 0:0")
	}
	slices.Sort(want)
	slices.Sort(tree)
	if !slices.Equal(tree, want) {
		t.Errorf("%s holds\n  %s\nwant exactly (no shell, nothing else)\n  %s", image, strings.Join(tree, "\n  "), strings.Join(want, "\n  "))
	}
	passwd, _ := os.ReadFile(filepath.Join(dir, "etc/passwd"))
	if !strings.Contains(string(passwd), "ax:x:65532:65532:") {
		t.Errorf("%s: /etc/passwd has no user ax:\n%s", image, passwd)
	}
	if certs, _ := os.ReadFile(filepath.Join(dir, "etc/ssl/certs/ca-certificates.crt")); !bytes.Contains(certs, []byte("BEGIN CERTIFICATE")) {
		t.Errorf("%s: no CA certificates", image)
	}
	for _, b := range bins {
		f, err := elf.Open(filepath.Join(dir, b))
		if err != nil {
			t.Fatalf("%s%s: %v", image, b, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s%s is dynamically linked", image, b)
			}
		}
		f.Close()
	}
}

// runner runs a container of an image: podman with the options found to
// work on this machine, else buildah run with chroot isolation.
type runner struct {
	store  imageStore
	podman []string // podman's run options; nil: buildah run
	desc   string
	t      *testing.T
}

func (r *runner) String() string { return r.desc }

// findRunner tries the ways to run a container that may work here and
// returns the first that runs ax version, logging why each other did not;
// none: the test skips, saying why.
func findRunner(t *testing.T, s imageStore, image string) *runner {
	t.Helper()
	var tried []string
	var candidates []*runner
	// AX_IMAGE_RUNNER=buildah tries buildah run only (podman: podman only).
	only := os.Getenv("AX_IMAGE_RUNNER")
	if _, err := exec.LookPath("podman"); err == nil && only != "buildah" {
		limits := []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}
		candidates = append(candidates,
			&runner{podman: []string{}, desc: "podman run (defaults)"},
			&runner{podman: limits, desc: "podman run --ulimit nofile=1024:1024 --ulimit nproc=1024:1024"})
		if _, err := exec.LookPath("runc"); err == nil {
			candidates = append(candidates, &runner{podman: append([]string{"--runtime", "runc"}, limits...),
				desc: "podman run --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024"})
		}
	} else if only != "buildah" {
		tried = append(tried, "podman: not installed (apt-get install podman)")
	}
	if only != "podman" {
		candidates = append(candidates, &runner{desc: "buildah run --isolation chroot"})
	}
	for _, r := range candidates {
		r.store, r.t = s, t
		out, err := r.run(image, "version")
		if err == nil {
			for _, why := range tried {
				t.Logf("containers: %s", why)
			}
			t.Logf("containers run here with: %s", r)
			return r
		}
		tried = append(tried, fmt.Sprintf("%s: %v: %s", r, err, lastLine(out)))
	}
	t.Skipf("no container can run on this machine (the images were built and checked):\n  %s", strings.Join(tried, "\n  "))
	return nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

func (r *runner) podmanCmd(args ...string) *exec.Cmd {
	return exec.Command("podman", append(r.store.args(), args...)...)
}

// run runs image with args to its end, without a network beyond loopback.
func (r *runner) run(image string, args ...string) ([]byte, error) {
	if r.podman != nil {
		return r.runIn("none", image, args...)
	}
	ctr, err := r.store.buildah("from", image)
	if err != nil {
		return ctr, err
	}
	id := strings.TrimSpace(string(ctr))
	defer r.store.buildah("rm", id)
	var entry []string
	if strings.Contains(image, "nats-server") {
		entry = []string{"/usr/local/bin/nats-server"}
	} else {
		entry = []string{"/usr/local/bin/ax"}
	}
	return r.store.buildah(append(append([]string{"run", "--isolation", "chroot", "--user", "65532:65532", id, "--"}, entry...), args...)...)
}

// runIn runs image with args in a podman network ("none", or
// "container:NAME" to share that container's).
func (r *runner) runIn(network, image string, args ...string) ([]byte, error) {
	cmdArgs := append(append([]string{"run", "--rm", "--network", network}, r.podman...), image)
	return r.podmanCmd(append(cmdArgs, args...)...).CombinedOutput()
}

// start runs a podman container in the background, removed when the test
// ends (after those started later), and returns its name.
func (r *runner) start(t *testing.T, name, network, image string, args ...string) string {
	t.Helper()
	cmdArgs := append(append([]string{"run", "-d", "--name", name, "--network", network}, r.podman...), image)
	if out, err := r.podmanCmd(append(cmdArgs, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("podman run %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() { _ = r.podmanCmd("rm", "-f", "-t", "2", name).Run() })
	return name
}

// logs returns the logs of the stack's containers.
func (r *runner) logs(prefix string) string {
	var b strings.Builder
	for _, c := range []string{"-nats", "-orchestrator", "-worker"} {
		out, _ := r.podmanCmd("logs", "--tail", "20", prefix+c).CombinedOutput()
		fmt.Fprintf(&b, "== %s%s\n%s\n", prefix, c, out)
	}
	return b.String()
}

func goArch(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(goBinary(), "env", "GOARCH").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// goModVersion is the version go.mod requires of module.
func goModVersion(t *testing.T, root, module string) string {
	t.Helper()
	cmd := exec.Command(goBinary(), "list", "-m", "-f", "{{.Version}}", module)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", module, err)
	}
	return strings.TrimSpace(string(out))
}
