package gated_test

// No exported type of this repository prints a password, however it is printed. The test finds
// the exported types that can reach a DSN by reading the source of every package of every module
// here, so that a new one fails it until it is printed below too.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/gatedhttp"
	"github.com/gatedsql/gated/internal/fakedb"
)

// printPassword is the password of the DSNs printed here; no piece of 4 characters of it
// appears in any other part of them, or in "xxxxx".
const printPassword = "S3cr3tPW0rd"

// printDSNs are DSNs holding printPassword, one per way of writing it.
var printDSNs = []string{
	"postgres://app:" + printPassword + "@db.example/shop?sslmode=disable",
	"host=db.example user=app password='" + printPassword[:5] + " " + printPassword[5:] + "' sslmode=disable",
	"postgres://app@db.example/shop?sslmode=disable&password=" + printPassword,
	"app:" + printPassword + "@tcp(db.example)/shop?parseTime=true",
}

// printSamples makes, for each exported type that can reach a DSN (by its package's import path
// and name), values of it that hold dsn, as callers hold them (a Connector by pointer).
var printSamples = map[string]func(t *testing.T, dsn string) []any{
	"github.com/gatedsql/gated.Config": func(t *testing.T, dsn string) []any {
		cfg := parseForPrint(t, dsn)
		return []any{cfg, *cfg}
	},
	"github.com/gatedsql/gated.Connector": func(t *testing.T, dsn string) []any {
		return withHolder(connectorForPrint(t, dsn))
	},
	"github.com/gatedsql/gated.Driver": func(t *testing.T, dsn string) []any {
		c := connectorForPrint(t, dsn)
		db := gated.OpenDB(c)
		t.Cleanup(func() { db.Close() })
		return append(withHolder(c.Driver()), withHolder(db.Driver())...)
	},
	"github.com/gatedsql/gated/gatedhttp.Rejecter": func(t *testing.T, dsn string) []any {
		return withHolder(gatedhttp.NewRejecter(connectorForPrint(t, dsn)))
	},
	"github.com/gatedsql/gated/internal/fakedb.Driver": func(t *testing.T, dsn string) []any {
		d := fakedb.New()
		conn, err := d.Open(dsn)
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
		if d.LastDSN() != dsn {
			t.Fatalf("fakedb.Driver did not record the DSN %q", dsn)
		}
		return []any{d}
	},
}

// A holder holds a value in an unexported field, as a caller's struct holds a Connector. fmt
// calls no method of such a field, and for a verb that a pointer does not serve (%s, %q, %d)
// it prints what the pointer points to field by field; a Config held so is printed field by
// field, which only its own type could prevent, so only the opaque types are held.
type holder[T any] struct{ x T }

// withHolder returns v and v in a holder.
func withHolder[T any](v T) []any { return []any{v, holder[T]{v}} }

func parseForPrint(t *testing.T, dsn string) *gated.Config {
	t.Helper()
	cfg, err := gated.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("ParseDSN(%q): %v", dsn, err)
	}
	return cfg
}

// connectorForPrint returns a Connector of dsn; it does no I/O.
func connectorForPrint(t *testing.T, dsn string) *gated.Connector {
	t.Helper()
	c, err := gated.NewConnector(parseForPrint(t, dsn))
	if err != nil {
		t.Fatalf("NewConnector(%q): %v", dsn, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// printedPieces returns the pieces of 4 characters of printPassword in text.
func printedPieces(text string) []string {
	var found []string
	for i := 0; i+4 <= len(printPassword); i++ {
		if p := printPassword[i : i+4]; strings.Contains(text, p) {
			found = append(found, p)
		}
	}
	return found
}

// printVerbs are the verbs callers print values with; %d is one a Stringer does not serve,
// so fmt would print a struct field by field.
var printVerbs = []string{"%v", "%+v", "%#v", "%s", "%q", "%d"}

// printings returns v printed as fmt and log/slog print it: alone and in a slice, a map, a
// struct field and a pointer to that struct, with every verb, and as an attribute of JSON
// and text log records.
func printings(v any) map[string]string {
	out := map[string]string{}
	rv := reflect.ValueOf(v)
	slice := reflect.MakeSlice(reflect.SliceOf(rv.Type()), 1, 1)
	slice.Index(0).Set(rv)
	m := reflect.MakeMap(reflect.MapOf(reflect.TypeFor[string](), rv.Type()))
	m.SetMapIndex(reflect.ValueOf("k"), rv)
	field := reflect.New(reflect.StructOf([]reflect.StructField{{Name: "X", Type: rv.Type()}}))
	field.Elem().Field(0).Set(rv)
	forms := map[string]any{
		"value": v, "slice": slice.Interface(), "map": m.Interface(),
		"field": field.Elem().Interface(), "pointer to field": field.Interface(),
	}
	for name, f := range forms {
		for _, verb := range printVerbs {
			out[verb+" of "+name] = fmt.Sprintf(verb, f)
		}
		out["Sprint of "+name] = fmt.Sprint(f)
	}
	for name, h := range map[string]func(*bytes.Buffer) slog.Handler{
		"JSON": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		for form, f := range forms {
			var b bytes.Buffer
			slog.New(h(&b)).Info("print", "v", f)
			out["slog "+name+" of "+form] = b.String()
		}
	}
	return out
}

// Every exported type that can reach a DSN prints without its password, in every fmt verb,
// inside slices, maps and structs, and in log/slog's JSON and text records; and the types it
// prints are exactly those that the source says can reach a DSN.
func TestExportedTypesPrintWithoutThePassword(t *testing.T) {
	reaching := exportedTypesReachingADSN(t)
	var want []string
	for name := range printSamples {
		want = append(want, name)
	}
	slices.Sort(want)
	if !slices.Equal(reaching, want) {
		t.Fatalf("exported types that can reach a DSN:\n\t%s\nprinted by this test:\n\t%s\n"+
			"give every such type printing methods that hide the password (see config.go) and a sample in printSamples",
			strings.Join(reaching, "\n\t"), strings.Join(want, "\n\t"))
	}
	for _, name := range want {
		for _, dsn := range printDSNs {
			for _, v := range printSamples[name](t, dsn) {
				for how, text := range printings(v) {
					if p := printedPieces(text); len(p) > 0 {
						t.Errorf("%s (%T) of DSN %q: %s printed %q, holding %q of the password", name, v, dsn, how, text, p)
					}
				}
			}
		}
	}
}

// A Connector and a Config print as the DSN with the password replaced, whatever the verb.
func TestConnectorPrintsItsRedactedDSN(t *testing.T) {
	c := connectorForPrint(t, "postgres://app:"+printPassword+"@db.example/shop?sslmode=disable&gate_concurrent=4")
	db := gated.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	c, ok := gated.FromDB(db)
	if !ok {
		t.Fatal("FromDB found no Connector")
	}
	want := c.Config().String()
	if !strings.Contains(want, "app:xxxxx@db.example") || !strings.Contains(want, "gate_concurrent=4") {
		t.Fatalf("Config().String() = %q, want the DSN with xxxxx for the password", want)
	}
	var log bytes.Buffer
	slog.New(slog.NewTextHandler(&log, nil)).Info("db", "connector", c)
	for _, tc := range []struct{ got, want string }{
		{fmt.Sprint(c), want},
		{fmt.Sprintf("%+v", c), want},
		{fmt.Sprintf("%s", c), want},
		{fmt.Sprintf("%q", c), strconv.Quote(want)},
		{fmt.Sprintf("%#v", c), "&gated.Connector(" + strconv.Quote(want) + ")"},
		{fmt.Sprintf("%d", c), "%!d(string=" + want + ")"},
		{fmt.Sprintf("%#v", c.Config()), "gated.Config(" + strconv.Quote(want) + ")"},
		{fmt.Sprintf("%v", (*gated.Connector)(nil)), "<nil>"},
		{fmt.Sprintf("%#v", (*gated.Connector)(nil)), "(*gated.Connector)(nil)"},
		{log.String(), "connector=" + strconv.Quote(want)},
	} {
		if !strings.Contains(tc.got, tc.want) {
			t.Errorf("printed %q, want %q", tc.got, tc.want)
		}
	}
}

// The errors of a DSN that does not work, from ParseDSN, sql.Open and a first operation, print
// without the password in every verb and in log/slog.
func TestDSNErrorsPrintWithoutThePassword(t *testing.T) {
	var dsns []string
	for _, driver := range []string{"pgx", "postgres"} {
		for _, dsn := range []string{
			"postgres://app:" + printPassword + "@127.0.0.1:abc/shop?sslmode=disable",
			"postgres://app:" + printPassword + "@127.0.0.1:5432/shop?sslmode=bogus",
			"postgres://app:" + printPassword + "@127.0.0.1:5432/shop?sslmode=disable&gate_queue=-x",
			"postgres://app:" + printPassword[:4] + "@" + printPassword[4:] + "@127.0.0.1:abc/shop",
			"postgres://app:" + printPassword[:4] + "%zz" + printPassword[4:] + "@127.0.0.1:5432/shop",
			"host=127.0.0.1 port=abc user=app password='" + printPassword[:5] + " " + printPassword[5:] + "'",
			"host=127.0.0.1 port=5432 user=app sslmode=bogus password=" + printPassword,
			"host=127.0.0.1 port=5432 user=app password='" + printPassword + " gate_queue=1",
			"postgres://app:" + printPassword + "@127.0.0.1:1/shop?sslmode=disable&connect_timeout=5",
		} {
			dsns = append(dsns, dsn+map[bool]string{true: "&", false: " "}[strings.Contains(dsn, "://")]+"gate_driver="+driver)
		}
	}
	for _, dsn := range dsns {
		var errs []error
		if _, err := gated.ParseDSN(dsn); err != nil {
			errs = append(errs, err)
		}
		db, err := sql.Open(gated.DriverName, dsn)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = db.PingContext(ctx)
			cancel()
			db.Close()
		}
		if err == nil {
			t.Fatalf("DSN %q worked", dsn)
		}
		errs = append(errs, err)
		for _, err := range errs {
			var de *gated.DSNError
			forms := []any{err}
			if errors.As(err, &de) {
				forms = append(forms, de, *de)
			}
			for _, v := range forms {
				for how, text := range printings(v) {
					if p := printedPieces(text); len(p) > 0 {
						t.Errorf("DSN %q: error %s printed %q, holding %q of the password", dsn, how, text, p)
					}
				}
			}
		}
	}
}

// exportedTypesReachingADSN returns, as "importpath.Name", the exported types of every package
// of every module of this repository that can reach a DSN: a Config, or a string field whose name
// says DSN, through fields, embedding, pointers, slices, arrays, maps, channels and generic
// arguments, in any package here. Interfaces and functions are not followed: what they hold is
// printed by its own type.
func exportedTypesReachingADSN(t *testing.T) []string {
	t.Helper()
	pkgs := parseRepository(t)
	var out []string
	for _, p := range pkgs {
		for name := range p.types {
			if ast.IsExported(name) && pkgs.reaches(p, name, map[string]bool{}) {
				out = append(out, p.path+"."+name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// A sourcePkg is the type declarations of one package.
type sourcePkg struct {
	path, name string
	types      map[string]sourceType
}

type sourceType struct {
	expr    ast.Expr
	imports map[string]string // the file's imports: local name (or "" for the default) by path
}

type sourcePkgs map[string]*sourcePkg // by import path

// parseRepository reads the type declarations of every package under the repository's root,
// the working directory of this test, giving each the import path of its module.
func parseRepository(t *testing.T) sourcePkgs {
	t.Helper()
	pkgs := sourcePkgs{}
	modules := map[string]string{} // module path by directory
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(dir string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return err
		}
		if base := e.Name(); dir != "." && (base == "testdata" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_")) {
			return filepath.SkipDir
		}
		if mod, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			for line := range strings.Lines(string(mod)) {
				if path, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
					modules[dir] = strings.Trim(strings.TrimSpace(path), `"`)
				}
			}
		}
		modDir := dir
		for modules[modDir] == "" && modDir != "." {
			modDir = filepath.Dir(modDir)
		}
		path := modules[modDir]
		if path == "" {
			return fmt.Errorf("%s: no go.mod above it", dir)
		}
		if rel, _ := filepath.Rel(modDir, dir); rel != "." {
			path += "/" + filepath.ToSlash(rel)
		}
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			return err
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			p := pkgs[path]
			if p == nil {
				p = &sourcePkg{path: path, name: f.Name.Name, types: map[string]sourceType{}}
				pkgs[path] = p
			}
			imports := map[string]string{}
			for _, imp := range f.Imports {
				ipath, _ := strconv.Unquote(imp.Path.Value)
				imports[ipath] = ""
				if imp.Name != nil {
					imports[ipath] = imp.Name.Name
				}
			}
			for _, d := range f.Decls {
				if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
					for _, s := range g.Specs {
						ts := s.(*ast.TypeSpec)
						p.types[ts.Name.Name] = sourceType{ts.Type, imports}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pkgs["github.com/gatedsql/gated"] == nil || pkgs["github.com/gatedsql/gated/gatedhttp"] == nil {
		t.Fatalf("read %d packages, not the repository's: run the test in its root", len(pkgs))
	}
	return pkgs
}

// reaches reports whether the type name of p can reach a DSN. seen holds the types on the way.
func (pkgs sourcePkgs) reaches(p *sourcePkg, name string, seen map[string]bool) bool {
	key := p.path + "." + name
	if seen[key] {
		return false
	}
	seen[key] = true
	if key == "github.com/gatedsql/gated.Config" {
		return true
	}
	st, ok := p.types[name]
	return ok && pkgs.exprReaches(p, st, st.expr, seen)
}

func (pkgs sourcePkgs) exprReaches(p *sourcePkg, st sourceType, e ast.Expr, seen map[string]bool) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return pkgs.reaches(p, e.Name, seen)
	case *ast.SelectorExpr:
		x, ok := e.X.(*ast.Ident)
		if !ok {
			return false
		}
		for path, local := range st.imports {
			if q := pkgs[path]; q != nil && (local == x.Name || local == "" && q.name == x.Name) {
				return pkgs.reaches(q, e.Sel.Name, seen)
			}
		}
		return false // outside this repository
	case *ast.StarExpr:
		return pkgs.exprReaches(p, st, e.X, seen)
	case *ast.ParenExpr:
		return pkgs.exprReaches(p, st, e.X, seen)
	case *ast.ArrayType:
		return pkgs.exprReaches(p, st, e.Elt, seen)
	case *ast.MapType:
		return pkgs.exprReaches(p, st, e.Key, seen) || pkgs.exprReaches(p, st, e.Value, seen)
	case *ast.ChanType:
		return pkgs.exprReaches(p, st, e.Value, seen)
	case *ast.IndexExpr:
		return pkgs.exprReaches(p, st, e.X, seen) || pkgs.exprReaches(p, st, e.Index, seen)
	case *ast.IndexListExpr:
		if pkgs.exprReaches(p, st, e.X, seen) {
			return true
		}
		for _, i := range e.Indices {
			if pkgs.exprReaches(p, st, i, seen) {
				return true
			}
		}
	case *ast.StructType:
		for _, f := range e.Fields.List {
			if pkgs.exprReaches(p, st, f.Type, seen) {
				return true
			}
			for _, n := range f.Names {
				if strings.Contains(strings.ToLower(n.Name), "dsn") && holdsStrings(f.Type) {
					return true
				}
			}
		}
	}
	return false
}

// holdsStrings reports whether a field of type e holds strings: string, *string, []string, ...
func holdsStrings(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == "string"
	case *ast.StarExpr:
		return holdsStrings(e.X)
	case *ast.ArrayType:
		return holdsStrings(e.Elt)
	case *ast.MapType:
		return holdsStrings(e.Key) || holdsStrings(e.Value)
	}
	return false
}
