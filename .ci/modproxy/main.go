// Command modproxy serves this repository's published modules the way a Go module proxy would,
// so that a consumer's build can be tried before anything is pushed, and checks the version
// rules those modules must keep. It uses only the standard library and git.
//
//	go run .ci/modproxy/main.go check      # the rules below; exits 1 when one is broken
//	go run .ci/modproxy/main.go proxy DIR  # write a proxy for GOPROXY=file://DIR
//
// Run it from the repository's root. The published modules and their versions are listed in
// .ci/versions, one "directory version" pair a line. The proxy serves each module at every
// git tag of it (v1.2.3 for the root, gatedprom/v1.2.3 for gatedprom), from the tagged commit,
// and at the version listed in .ci/versions from HEAD when that version has no tag yet (a clone
// without tags, or a release not tagged yet). It serves committed files only.
//
// Its layout is the one of golang.org/x/mod/module and golang.org/x/mod/zip, as the go command
// builds it from a git repository: <module>/@v/list, <version>.info, <version>.mod,
// <version>.zip, files in the zip under <module>@<version>/, nested modules' directories, vendored
// packages and symbolic links left out, and the repository's LICENSE added to a module in a
// subdirectory that has none of its own.
//
// The rules check enforces:
//   - every listed directory holds a go.mod, its version is a valid semantic version whose major
//     version matches the module path (/v2 for v2, none for v0 and v1);
//   - a published module's go.mod has no replace or exclude directive: a consumer's build
//     ignores both, so the module would build differently as a dependency than it does here;
//   - every module in go.work that requires a published module requires the version listed in
//     .ci/versions, which is the version the proxy serves.
package main

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

const versionsFile = ".ci/versions"

// published is one line of .ci/versions.
type published struct {
	dir     string // relative to the repository's root, "." for the root
	version string
	path    string // module path, from dir/go.mod in the working tree
}

// tagPrefix is what precedes a version in the module's git tags.
func (p published) tagPrefix() string {
	if p.dir == "." {
		return ""
	}
	return p.dir + "/"
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "check":
		err = check()
	case "proxy":
		if len(os.Args) != 3 {
			usage()
		}
		err = proxy(os.Args[2])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: go run .ci/modproxy/main.go check | proxy DIR")
	os.Exit(2)
}

var semverRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

func readVersions() ([]published, error) {
	data, err := os.ReadFile(versionsFile)
	if err != nil {
		return nil, err
	}
	var mods []published
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("%s:%d: want \"directory version\", have %q", versionsFile, n, sc.Text())
		}
		mf, err := goModJSON(filepath.Join(f[0], "go.mod"))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", versionsFile, n, err)
		}
		mods = append(mods, published{dir: path.Clean(f[0]), version: f[1], path: mf.Module.Path})
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("%s lists no module", versionsFile)
	}
	return mods, sc.Err()
}

// goMod is the part of `go mod edit -json` used here.
type goMod struct {
	Module  struct{ Path string }
	Require []struct{ Path, Version string }
	Replace []struct {
		Old struct{ Path, Version string }
	}
	Exclude []struct{ Path, Version string }
}

func goModJSON(file string) (*goMod, error) {
	out, err := exec.Command("go", "mod", "edit", "-json", file).Output()
	if err != nil {
		return nil, fmt.Errorf("go mod edit -json %s: %v%s", file, err, stderrOf(err))
	}
	var m goMod
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	return &m, nil
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

func check() error {
	mods, err := readVersions()
	if err != nil {
		return err
	}
	var problems []string
	want := map[string]string{} // module path -> listed version
	for _, m := range mods {
		want[m.path] = m.version
		if !semverRE.MatchString(m.version) {
			problems = append(problems, fmt.Sprintf("%s: %q is not a semantic version vMAJOR.MINOR.PATCH", m.dir, m.version))
			continue
		}
		major, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(m.version, ".", 2)[0], "v"))
		suffix := regexp.MustCompile(`/v([2-9]|[1-9][0-9]+)$`).FindStringSubmatch(m.path)
		switch {
		case major >= 2 && (suffix == nil || suffix[1] != strconv.Itoa(major)):
			problems = append(problems, fmt.Sprintf("%s: version %s needs the module path to end in /v%d, not %s", m.dir, m.version, major, m.path))
		case major < 2 && suffix != nil:
			problems = append(problems, fmt.Sprintf("%s: module path %s needs a v%s version, not %s", m.dir, m.path, suffix[1], m.version))
		}
		mf, err := goModJSON(filepath.Join(m.dir, "go.mod"))
		if err != nil {
			return err
		}
		for _, r := range mf.Replace {
			problems = append(problems, fmt.Sprintf("%s/go.mod: replace %s: a consumer's build ignores it; develop through go.work instead", m.dir, r.Old.Path))
		}
		for _, x := range mf.Exclude {
			problems = append(problems, fmt.Sprintf("%s/go.mod: exclude %s %s: a consumer's build ignores it", m.dir, x.Path, x.Version))
		}
	}

	out, err := exec.Command("go", "work", "edit", "-json").Output()
	if err != nil {
		return fmt.Errorf("go work edit -json: %v%s", err, stderrOf(err))
	}
	var work struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(out, &work); err != nil {
		return fmt.Errorf("go.work: %v", err)
	}
	for _, u := range work.Use {
		file := filepath.Join(u.DiskPath, "go.mod")
		mf, err := goModJSON(file)
		if err != nil {
			return err
		}
		for _, r := range mf.Require {
			if v, ok := want[r.Path]; ok && r.Version != v {
				problems = append(problems, fmt.Sprintf("%s requires %s %s, but %s lists %s: (cd %s && go mod edit -require=%s@%s)",
					filepath.Clean(file), r.Path, r.Version, versionsFile, v, filepath.Clean(u.DiskPath), r.Path, v))
			}
		}
	}
	if len(problems) > 0 {
		return errors.New("the published modules break their version rules:\n  " + strings.Join(problems, "\n  "))
	}
	for _, m := range mods {
		fmt.Printf("modproxy: %s %s (tag %s%s)\n", m.path, m.version, m.tagPrefix(), m.version)
	}
	return nil
}

// release is one version of one module the proxy serves.
type release struct {
	mod     published
	version string
	commit  string
	from    string // "tag NAME" or "HEAD"
}

func git(args ...string) (string, error) {
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v%s", strings.Join(args, " "), err, stderrOf(err))
	}
	return strings.TrimSpace(string(out)), nil
}

func proxy(dir string) error {
	mods, err := readVersions()
	if err != nil {
		return err
	}
	head, err := git("rev-parse", "HEAD")
	if err != nil {
		return err
	}
	tagList, err := git("tag", "--list")
	if err != nil {
		return err
	}
	tags := strings.Fields(tagList)
	for _, m := range mods {
		var rels []release
		listed := false
		for _, t := range tags {
			v, ok := strings.CutPrefix(t, m.tagPrefix())
			if !ok || !semverRE.MatchString(v) {
				continue
			}
			c, err := git("rev-list", "-n", "1", t)
			if err != nil {
				return err
			}
			rels = append(rels, release{m, v, c, "tag " + t})
			listed = listed || v == m.version
		}
		if !listed {
			rels = append(rels, release{m, m.version, head, "HEAD"})
		}
		var served []string
		for _, r := range rels {
			n, err := writeRelease(dir, r)
			if err != nil {
				return fmt.Errorf("%s %s (%s): %v", m.path, r.version, r.from, err)
			}
			if n < 0 {
				fmt.Printf("modproxy: %s %s (%s): no go.mod for %s there; not served\n", m.path, r.version, r.from, m.path)
				continue
			}
			served = append(served, r.version)
			fmt.Printf("modproxy: %s %s from %s (%.12s), %d files\n", m.path, r.version, r.from, r.commit, n)
		}
		sort.Slice(served, func(i, j int) bool { return semverLess(served[i], served[j]) })
		vdir := filepath.Join(dir, escapePath(m.path), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		list := strings.Join(served, "\n")
		if list != "" {
			list += "\n"
		}
		if err := os.WriteFile(filepath.Join(vdir, "list"), []byte(list), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeRelease writes r's .info, .mod and .zip and returns how many files its zip holds, or -1
// when r's commit has no go.mod for r's module.
func writeRelease(dir string, r release) (int, error) {
	files, err := archive(r.commit)
	if err != nil {
		return 0, err
	}
	prefix := ""
	if r.mod.dir != "." {
		prefix = r.mod.dir + "/"
	}
	gomod, ok := files[prefix+"go.mod"]
	if !ok || modulePath(gomod) != r.mod.path {
		return -1, nil
	}

	// Directories (relative to the module) holding a go.mod of their own: nested modules.
	nested := map[string]bool{}
	for name := range files {
		if rel, ok := strings.CutPrefix(name, prefix); ok && path.Base(rel) == "go.mod" && rel != "go.mod" {
			nested[path.Dir(rel)+"/"] = true
		}
	}
	inNested := func(rel string) bool {
		for d := path.Dir(rel); d != "."; d = path.Dir(d) {
			if nested[d+"/"] {
				return true
			}
		}
		return false
	}
	var names []string
	for name := range files {
		rel, ok := strings.CutPrefix(name, prefix)
		if !ok || inNested(rel) || vendored(rel) || rel == ".hg_archival.txt" {
			continue
		}
		names = append(names, rel)
	}
	content := func(rel string) []byte { return files[prefix+rel] }
	if _, ok := files[prefix+"LICENSE"]; !ok && prefix != "" {
		if lic, ok := files["LICENSE"]; ok {
			names = append(names, "LICENSE")
			content = func(rel string) []byte {
				if rel == "LICENSE" {
					return lic
				}
				return files[prefix+rel]
			}
		}
	}
	sort.Strings(names)

	when, err := git("show", "-s", "--format=%cI", r.commit)
	if err != nil {
		return 0, err
	}
	t, err := time.Parse(time.RFC3339, when)
	if err != nil {
		return 0, fmt.Errorf("commit time %q: %v", when, err)
	}
	info, err := json.Marshal(struct {
		Version string
		Time    string
	}{r.version, t.UTC().Format(time.RFC3339)})
	if err != nil {
		return 0, err
	}

	vdir := filepath.Join(dir, escapePath(r.mod.path), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return 0, err
	}
	base := filepath.Join(vdir, r.version)
	if err := os.WriteFile(base+".info", append(info, '\n'), 0o644); err != nil {
		return 0, err
	}
	if err := os.WriteFile(base+".mod", gomod, 0o644); err != nil {
		return 0, err
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, rel := range names {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: r.mod.path + "@" + r.version + "/" + rel, Method: zip.Deflate, Modified: t})
		if err != nil {
			return 0, err
		}
		if _, err := w.Write(content(rel)); err != nil {
			return 0, err
		}
	}
	if err := zw.Close(); err != nil {
		return 0, err
	}
	return len(names), os.WriteFile(base+".zip", buf.Bytes(), 0o644)
}

// archive returns the regular files of commit by path, as git archive exports them for the go
// command (export-ignore honoured, line endings as committed). Symbolic links are left out, as
// golang.org/x/mod/zip leaves them out.
func archive(commit string) (map[string][]byte, error) {
	cmd := exec.Command("git", "-c", "core.autocrlf=input", "-c", "core.eol=lf", "archive", "--format=tar", commit)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			cmd.Wait()
			return nil, fmt.Errorf("git archive %s: %v", commit, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			cmd.Wait()
			return nil, err
		}
		files[h.Name] = data
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("git archive %s: %v: %s", commit, err, strings.TrimSpace(stderr.String()))
	}
	return files, nil
}

var moduleRE = regexp.MustCompile(`(?m)^module\s+"?([^\s"]+)"?\s*$`)

func modulePath(gomod []byte) string {
	if m := moduleRE.FindSubmatch(gomod); m != nil {
		return string(m[1])
	}
	return ""
}

// vendored reports whether rel is a file of a vendored package, which golang.org/x/mod/zip
// leaves out of a module's zip (vendor/modules.txt too, since go 1.24).
func vendored(rel string) bool {
	if rel == "vendor/modules.txt" {
		return true
	}
	var rest string
	if r, ok := strings.CutPrefix(rel, "vendor/"); ok {
		rest = r
	} else if i := strings.Index(rel, "/vendor/"); i >= 0 {
		rest = rel[i+len("/vendor/"):]
	} else {
		return false
	}
	return strings.Contains(rest, "/")
}

// escapePath is golang.org/x/mod/module.EscapePath for valid paths: each capital letter becomes
// '!' and its lower case.
func escapePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// semverLess orders valid semantic versions; a pre-release sorts before its release, and
// pre-releases compare as strings, which is enough to order a list file (the go command sorts
// it again).
func semverLess(a, b string) bool {
	pa, pb := semverParts(a), semverParts(b)
	for i := range 3 {
		if pa.num[i] != pb.num[i] {
			return pa.num[i] < pb.num[i]
		}
	}
	switch {
	case pa.pre == pb.pre:
		return false
	case pa.pre == "":
		return false
	case pb.pre == "":
		return true
	}
	return pa.pre < pb.pre
}

type parts struct {
	num [3]int
	pre string
}

func semverParts(v string) parts {
	var p parts
	core, pre, _ := strings.Cut(strings.TrimPrefix(v, "v"), "-")
	for i, s := range strings.SplitN(core, ".", 3) {
		p.num[i], _ = strconv.Atoi(s)
	}
	p.pre = pre
	return p
}
