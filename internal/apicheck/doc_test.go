package apicheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestExportedNamesAreDocumented parses the packages' non-test files and
// requires a package comment and a doc comment on every exported
// function, method, type, constant and variable (a group's comment covers
// the names in it) and on every exported struct field (a comment on the
// field before it in the same run of lines covers it when it names it).
// The doc comment of a function, method or type starts with its name.
func TestExportedNamesAreDocumented(t *testing.T) {
	var problems []string
	for _, path := range documented {
		problems = append(problems, undocumented(t, path)...)
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

func undocumented(t *testing.T, path string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", path).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", path, err)
	}
	dir := strings.TrimSpace(string(out))
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			t.Fatalf("parse %s: %v", e.Name(), err)
		}
		files = append(files, f)
	}
	var problems []string
	report := func(pos token.Pos, format string, args ...any) {
		p := fset.Position(pos)
		problems = append(problems, fmt.Sprintf("%s:%d: %s", p.Filename[len(dir)+1:], p.Line, fmt.Sprintf(format, args...)))
	}
	{
		hasPkgDoc := false
		for _, f := range files {
			if f.Doc != nil {
				hasPkgDoc = true
			}
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
						continue
					}
					name := d.Name.Name
					if d.Recv != nil {
						name = recvName(d.Recv) + "." + name
					}
					if !startsWith(d.Doc, d.Name.Name) {
						report(d.Pos(), "%s: doc comment missing or not starting with %q", name, d.Name.Name)
					}
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch s := spec.(type) {
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							doc := s.Doc
							if doc == nil && len(d.Specs) == 1 {
								doc = d.Doc
							}
							if !startsWith(doc, s.Name.Name) {
								report(s.Pos(), "type %s: doc comment missing or not starting with its name", s.Name.Name)
							}
							if st, ok := s.Type.(*ast.StructType); ok {
								fields(st, s.Name.Name, report)
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() && s.Doc == nil && s.Comment == nil && d.Doc == nil {
									report(n.Pos(), "%s: no doc comment (nor one on its group)", n.Name)
								}
							}
						}
					}
				}
			}
		}
		if !hasPkgDoc {
			problems = append(problems, path+": no package comment")
		}
	}
	return problems
}

// fields reports exported fields without a comment of their own or a
// covering one on the field just before them.
func fields(st *ast.StructType, typeName string, report func(token.Pos, string, ...any)) {
	var prevDoc string
	for _, f := range st.Fields.List {
		own := f.Doc.Text() + f.Comment.Text()
		for _, n := range f.Names {
			if !n.IsExported() {
				continue
			}
			if own == "" && !(prevDoc != "" && strings.Contains(prevDoc, n.Name)) {
				report(n.Pos(), "field %s.%s: no comment", typeName, n.Name)
			}
		}
		if len(f.Names) == 0 { // embedded: documented by its type
			own = "embedded"
		}
		if own != "" {
			prevDoc = own // a field without a comment keeps the covering one for the next
		}
	}
}

func startsWith(doc *ast.CommentGroup, name string) bool {
	if doc == nil {
		return false
	}
	text := doc.Text()
	for _, article := range []string{"", "A ", "An ", "The "} {
		if strings.HasPrefix(text, article+name) {
			return true
		}
	}
	return false
}

func exportedRecv(r *ast.FieldList) bool { return ast.IsExported(recvName(r)) }

func recvName(r *ast.FieldList) string {
	typ := r.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	switch x := typ.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.IndexExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			return id.Name
		}
	}
	return ""
}
