package apicheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// public are the packages a user imports; nothing they export may need an
// internal package.
var public = []string{
	"github.com/ax-run/ax/sdk",
	"github.com/ax-run/ax/executor",
	"github.com/ax-run/ax/orchestrator",
	"github.com/ax-run/ax/task",
	"github.com/ax-run/ax/axtest",
	"github.com/ax-run/ax/outbox",
	"github.com/ax-run/ax/codec",
}

// backends are the module paths of the logging and metrics libraries an
// embedder must not be forced to link or adopt: the public packages log
// through log/slog and report metrics through hooks (executor/promexec and
// orchestrator/promorch feed Prometheus).
var backends = []string{
	"github.com/prometheus/",
	"github.com/rs/zerolog",
}

// isBackend reports whether the package at path belongs to one of backends.
func isBackend(path string) bool {
	for _, b := range backends {
		if strings.HasPrefix(path, b) && (strings.HasSuffix(b, "/") || path == b || strings.HasPrefix(path, b+"/")) {
			return true
		}
	}
	return false
}

// forbidden reports why a type from package path may not appear in the
// public API, or "" when it may.
func forbidden(path string) string {
	switch {
	case path == "internal" || strings.HasPrefix(path, "internal/") ||
		strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal"):
		return "an internal package, which code outside the module cannot import"
	case isBackend(path):
		return "a logging or metrics library every embedder would have to adopt"
	}
	return ""
}

// TestPublicAPIHasNoInternalTypes type-checks the public packages from the
// compiler's export data and walks every exported name: constants,
// variables, functions, types with their exported fields and methods,
// recursively through the unexported types an exported name exposes.
func TestPublicAPIHasNoInternalTypes(t *testing.T) {
	exports := exportData(t, public)
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	var problems []string
	for _, path := range public {
		pkg, err := imp.Import(path)
		if err != nil {
			t.Fatalf("import %s: %v", path, err)
		}
		w := &walker{pkg: pkg, seen: map[types.Type]bool{}}
		scope := pkg.Scope()
		for _, name := range scope.Names() {
			obj := scope.Lookup(name)
			if !obj.Exported() {
				continue
			}
			w.object(pkg.Name()+"."+name, obj)
		}
		problems = append(problems, w.problems...)
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
	if len(problems) == 0 {
		t.Logf("checked the exported API of %d packages", len(public))
	}
}

// TestForbiddenDetectsInternal keeps the check itself honest: it must flag
// an internal type reached through a pointer, a slice, a map value, a
// function result and an unexported struct's exported field.
func TestForbiddenDetectsInternal(t *testing.T) {
	internal := types.NewPackage("github.com/ax-run/ax/internal/retry", "retry")
	policy := types.NewNamed(types.NewTypeName(token.NoPos, internal, "Policy", nil), types.NewStruct(nil, nil), nil)
	self := types.NewPackage("github.com/ax-run/ax/orchestrator", "orchestrator")
	hidden := types.NewNamed(types.NewTypeName(token.NoPos, self, "hidden", nil),
		types.NewStruct([]*types.Var{types.NewField(token.NoPos, self, "P", policy, false)}, nil), nil)
	cases := map[string]types.Type{
		"pointer":      types.NewPointer(policy),
		"slice":        types.NewSlice(policy),
		"map value":    types.NewMap(types.Typ[types.String], policy),
		"func result":  types.NewSignatureType(nil, nil, nil, nil, types.NewTuple(types.NewVar(token.NoPos, self, "", policy)), false),
		"hidden field": hidden,
	}
	for name, typ := range cases {
		w := &walker{pkg: self, seen: map[types.Type]bool{}}
		w.typ(name, typ)
		if len(w.problems) != 1 || !strings.Contains(w.problems[0], "internal/retry.Policy") {
			t.Errorf("%s: problems %q, want one naming internal/retry.Policy", name, w.problems)
		}
	}
	if forbidden("github.com/ax-run/ax/task") != "" || forbidden("log/slog") != "" {
		t.Error("public packages must be allowed")
	}
	for _, path := range []string{"github.com/rs/zerolog", "github.com/prometheus/client_golang/prometheus"} {
		if forbidden(path) == "" {
			t.Errorf("%s must be forbidden in exported signatures", path)
		}
	}
	if forbidden("github.com/rs/zerologx") != "" {
		t.Error("only zerolog itself is forbidden, not a module whose path starts like it")
	}
	// A *zerolog.Logger field and a prometheus.Registerer parameter are flagged.
	zl := types.NewNamed(types.NewTypeName(token.NoPos, types.NewPackage("github.com/rs/zerolog", "zerolog"), "Logger", nil), types.NewStruct(nil, nil), nil)
	reg := types.NewNamed(types.NewTypeName(token.NoPos, types.NewPackage("github.com/prometheus/client_golang/prometheus", "prometheus"), "Registerer", nil), types.NewInterfaceType(nil, nil), nil)
	for name, typ := range map[string]types.Type{
		"zerolog field":       types.NewStruct([]*types.Var{types.NewField(token.NoPos, self, "Logger", types.NewPointer(zl), false)}, nil),
		"prometheus argument": types.NewSignatureType(nil, nil, nil, types.NewTuple(types.NewVar(token.NoPos, self, "reg", reg)), nil, false),
	} {
		w := &walker{pkg: self, seen: map[types.Type]bool{}}
		w.typ(name, typ)
		if len(w.problems) != 1 || !strings.Contains(w.problems[0], "logging or metrics library") {
			t.Errorf("%s: problems %q, want one naming a logging or metrics library", name, w.problems)
		}
	}
}

type walker struct {
	pkg      *types.Package
	seen     map[types.Type]bool
	problems []string
}

func (w *walker) object(where string, obj types.Object) {
	switch o := obj.(type) {
	case *types.TypeName:
		w.typ(where, o.Type())
		if !o.IsAlias() {
			w.methods(where, o.Type())
		}
	default:
		w.typ(where, obj.Type())
	}
}

// methods walks the exported methods of a named type and of its pointer.
func (w *walker) methods(where string, t types.Type) {
	ms := types.NewMethodSet(types.NewPointer(t))
	for i := range ms.Len() {
		m := ms.At(i).Obj()
		if m.Exported() {
			w.typ(where+"."+m.Name(), m.Type())
		}
	}
}

func (w *walker) typ(where string, t types.Type) {
	if n, ok := t.(*types.Named); ok && n.Obj().Pkg() != nil {
		if why := forbidden(n.Obj().Pkg().Path()); why != "" {
			w.problems = append(w.problems, fmt.Sprintf("%s uses %s.%s from %s", where, n.Obj().Pkg().Path(), n.Obj().Name(), why))
			return
		}
	}
	if t == nil || w.seen[t] {
		return
	}
	w.seen[t] = true
	switch t := t.(type) {
	case *types.Alias:
		w.typ(where, types.Unalias(t))
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() == nil {
			return // error, comparable
		}
		for i := range t.TypeArgs().Len() {
			w.typ(where, t.TypeArgs().At(i))
		}
		// Another package's type is that package's business (a public
		// package is checked itself); this package's types, exported or
		// not, are walked where an exported name exposes them.
		if obj.Pkg() != w.pkg {
			return
		}
		w.typ(where, t.Underlying())
		if !obj.Exported() {
			w.methods(where+"("+obj.Name()+")", t)
		}
	case *types.Pointer:
		w.typ(where, t.Elem())
	case *types.Slice:
		w.typ(where, t.Elem())
	case *types.Array:
		w.typ(where, t.Elem())
	case *types.Map:
		w.typ(where, t.Key())
		w.typ(where, t.Elem())
	case *types.Chan:
		w.typ(where, t.Elem())
	case *types.Signature:
		w.tuple(where, t.Params())
		w.tuple(where, t.Results())
		for i := range t.TypeParams().Len() {
			w.typ(where, t.TypeParams().At(i).Constraint())
		}
	case *types.Struct:
		for i := range t.NumFields() {
			f := t.Field(i)
			if f.Exported() || f.Embedded() {
				w.typ(where+"."+f.Name(), f.Type())
			}
		}
	case *types.Interface:
		for i := range t.NumEmbeddeds() {
			w.typ(where, t.EmbeddedType(i))
		}
		for i := range t.NumExplicitMethods() {
			m := t.ExplicitMethod(i)
			if m.Exported() {
				w.typ(where+"."+m.Name(), m.Type())
			}
		}
	case *types.Union:
		for i := range t.Len() {
			w.typ(where, t.Term(i).Type())
		}
	case *types.TypeParam:
		w.typ(where, t.Constraint())
	}
}

func (w *walker) tuple(where string, t *types.Tuple) {
	for i := range t.Len() {
		w.typ(where, t.At(i).Type())
	}
}

// exportData compiles the packages and their dependencies (the build cache
// makes this cheap after the first run) and returns each import path's
// export data file.
func exportData(t *testing.T, pkgs []string) map[string]string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test runs the go command to compile the public packages; put go on PATH: %v", err)
	}
	args := append([]string{"list", "-export", "-deps", "-json=ImportPath,Export"}, pkgs...)
	cmd := exec.Command(gobin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.String())
	}
	files := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		if p.Export != "" {
			files[p.ImportPath] = p.Export
		}
	}
	return files
}
