// Command tally runs a test binary and counts its top-level tests, and compares two runs.
//
//	tally run -suite pgx-stdlib -mode plain -dir PKGDIR -log run.json -out plain.txt [-run RE] [-skip RE] -- BINARY [FLAGS]
//
// runs BINARY (built with go test -c) in PKGDIR under `go tool test2json`, appends the event
// stream to -log, writes one "pass|fail|skip TestName" line per top-level test to -out and prints
// "pgx-stdlib plain: N passed, M failed". Subtests are not counted: a top-level test fails when
// any of its subtests does. When a test ends the process (a panic, log.Fatal, os.Exit, the
// -test.timeout), it counts as failed, and the binary is run again for the tests that had not
// run yet (from -test.list), after the -reset command, so one crash does not hide the results of
// the tests after it.
//
//	tally compare -suite pgx-stdlib [-log gated.json] plain.txt gated.txt
//
// prints the tests that pass in the first run and not in the second (with their output from
// -log), and exits with status 1 when there is any.
//
// Exit status 2 means tally itself could not do its work (no test ran, unreadable files).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: tally run|compare ...")
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runCmd(os.Args[2:])
	case "compare":
		var lost bool
		lost, err = compareCmd(os.Args[2:])
		if err == nil && lost {
			os.Exit(1)
		}
	default:
		err = fmt.Errorf("unknown command %q (want run or compare)", os.Args[1])
	}
	if err != nil {
		fail("tally: " + err.Error())
	}
}

func runCmd(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	suite := fs.String("suite", "", "suite name for the summary line")
	mode := fs.String("mode", "", "run name for the summary line (plain or gated)")
	dir := fs.String("dir", ".", "directory to run the binary in (its package directory)")
	logPath := fs.String("log", "", "file to append the test2json stream to")
	out := fs.String("out", "", "file to write one `result TestName` line per top-level test to")
	skip := fs.String("skip", "", "regular expression of top-level tests not to run")
	run := fs.String("run", ".", "regular expression of top-level tests to run")
	reset := fs.String("reset", "", "bash command to run before running the binary again after a crash (to reset the database)")
	fs.Parse(args)
	if fs.NArg() < 1 || *logPath == "" || *out == "" {
		return fmt.Errorf("run needs -log, -out and a binary")
	}
	if *skip != "" {
		if _, err := regexp.Compile(*skip); err != nil {
			return fmt.Errorf("-skip: %v", err)
		}
	}
	if _, err := regexp.Compile(*run); err != nil {
		return fmt.Errorf("-run: %v", err)
	}
	logFile, err := os.OpenFile(*logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()

	var skipRE *regexp.Regexp
	if *skip != "" {
		skipRE = regexp.MustCompile(*skip)
	}
	var want []string // the top-level tests the runs must report
	for _, name := range listTests(*dir, fs.Arg(0), *run) {
		if skipRE == nil || !skipRE.MatchString(name) {
			want = append(want, name)
		}
	}

	results := make(map[string]string)
	var crashed []string
	outsideTests := false // the last process failed although none of its tests did: TestMain's checks
	for {
		var done []string
		for name := range results {
			done = append(done, regexp.QuoteMeta(name))
		}
		skipArg := *skip
		if len(done) > 0 {
			if skipArg != "" {
				skipArg += "|"
			}
			slices.Sort(done)
			skipArg += "^(" + strings.Join(done, "|") + ")$"
		}
		cmdArgs := []string{"tool", "test2json", "-t", "-p", *suite, fs.Arg(0), "-test.v=test2json", "-test.run", *run}
		if skipArg != "" {
			cmdArgs = append(cmdArgs, "-test.skip", skipArg)
		}
		cmdArgs = append(cmdArgs, fs.Args()[1:]...)
		cmd := exec.Command("go", cmdArgs...)
		cmd.Dir = *dir
		cmd.Stderr = logFile
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		round, err := tally(io.TeeReader(stdout, logFile))
		cmd.Wait() // a failing test makes the status non-zero; the stream says which
		if err != nil {
			return err
		}
		for name, r := range round.results {
			if r != "" {
				results[name] = r
			}
		}
		remaining := slices.ContainsFunc(want, func(name string) bool { _, ok := results[name]; return !ok })
		if !remaining || round.last == "" {
			outsideTests = round.pkgFailed && !slices.ContainsFunc(slices.Collect(maps.Values(round.results)),
				func(r string) bool { return r != "pass" && r != "skip" })
			break
		}
		// The process ended before running every test: the test it was running last ended it (its
		// panic or fatal message is its last output) and may have left behind what its cleanup
		// would have removed. Tests paused beside it (t.Parallel) run again.
		results[round.last] = "fail"
		crashed = append(crashed, round.last)
		if *reset != "" {
			cmd := exec.Command("bash", "-c", *reset)
			cmd.Stdout, cmd.Stderr = logFile, logFile
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("-reset: %v (see %s)", err, *logPath)
			}
		}
	}
	for _, name := range want {
		if _, ok := results[name]; !ok {
			results[name] = "fail"
			crashed = append(crashed, name+" (never ran)")
		}
	}
	if len(results) == 0 {
		return fmt.Errorf("%s %s: no test ran (see %s)", *suite, *mode, *logPath)
	}

	names := make([]string, 0, len(results))
	for name := range results {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	var passed, failed, skipped []string
	for _, name := range names {
		r := results[name]
		fmt.Fprintf(&b, "%s %s\n", r, name)
		switch r {
		case "pass":
			passed = append(passed, name)
		case "skip":
			skipped = append(skipped, name)
		default:
			failed = append(failed, name)
		}
	}
	// The process's own result joins the comparison, not the count.
	if outsideTests {
		b.WriteString("fail " + processResult + "\n")
	} else {
		b.WriteString("pass " + processResult + "\n")
	}
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Printf("%s %s: %d passed, %d failed\n", *suite, *mode, len(passed), len(failed))
	if len(failed) > 0 {
		fmt.Printf("  failed: %s\n", strings.Join(failed, " "))
	}
	if len(crashed) > 0 {
		slices.Sort(crashed)
		fmt.Printf("  ended the test process (counted as failed): %s\n", strings.Join(crashed, " "))
	}
	if outsideTests {
		fmt.Printf("  the test process failed after its tests passed (TestMain's checks; see %s)\n", *logPath)
	}
	if len(skipped) > 0 {
		fmt.Printf("  skipped by the suite itself: %s\n", strings.Join(skipped, " "))
	}
	return nil
}

func compareCmd(args []string) (lost bool, err error) {
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	suite := fs.String("suite", "", "suite name for the summary line")
	logPath := fs.String("log", "", "the second run's test2json stream, to print the output of the tests it lost")
	expected := fs.String("expected", "", "comma-separated tests that gated fails by design (documented in README.md): reported, not counted")
	lostPath := fs.String("lost", "", "file to write the top-level tests the second run lost to, one per line (empty when none)")
	fs.Parse(args)
	byDesign := map[string]bool{}
	for _, n := range strings.Split(*expected, ",") {
		if n != "" {
			byDesign[n] = true
		}
	}
	if fs.NArg() != 2 {
		return false, fmt.Errorf("compare needs two result files")
	}
	base, err := readResults(fs.Arg(0))
	if err != nil {
		return false, err
	}
	cand, err := readResults(fs.Arg(1))
	if err != nil {
		return false, err
	}
	var names, lostTests, designed []string
	for name, r := range base {
		if r == "pass" && cand[name] != "pass" && byDesign[name] {
			designed = append(designed, name)
			continue
		}
		if r == "pass" && cand[name] != "pass" {
			lostTests = append(lostTests, name)
			if name == processResult {
				name = processResult + " (the test process failed after its tests; TestMain's checks)"
			}
			names = append(names, name)
		}
	}
	slices.Sort(names)
	slices.Sort(lostTests)
	slices.Sort(designed)
	if *lostPath != "" {
		var b strings.Builder
		for _, n := range lostTests {
			b.WriteString(n + "\n")
		}
		if err := os.WriteFile(*lostPath, []byte(b.String()), 0o644); err != nil {
			return false, err
		}
	}
	if len(designed) > 0 {
		fmt.Printf("%s: gated fails %d test(s) by design (see conformance/README.md): %s\n", *suite, len(designed), strings.Join(designed, " "))
	}
	if len(names) == 0 {
		fmt.Printf("%s: gated passes every test that passes plain\n", *suite)
		return false, nil
	}
	fmt.Printf("%s: gated fails %d test(s) that pass plain: %s\n", *suite, len(names), strings.Join(names, " "))
	if *logPath != "" {
		if err := printOutput(*logPath, names); err != nil {
			return true, err
		}
	}
	return true, nil
}

// processResult names, in -out files, the result of the test process outside its tests.
const processResult = "(process)"

// event is the part of a test2json event that tally reads.
type event struct {
	Action string
	Test   string
	Output string
}

// roundResult is what one test process reported.
type roundResult struct {
	results   map[string]string // top-level test: "pass", "fail", "skip", or "" when it never ended
	pkgFailed bool              // the process reported failure
	last      string            // the top-level test of the last event that named a test
}

// tally reads a test2json stream. Lines that are not JSON are ignored.
func tally(r io.Reader) (roundResult, error) {
	rr := roundResult{results: make(map[string]string)}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var ev event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		if ev.Test == "" && ev.Action == "fail" {
			rr.pkgFailed = true
		}
		top, _, _ := strings.Cut(ev.Test, "/")
		if !strings.HasPrefix(top, "Test") {
			continue // examples, benchmarks and fuzz targets are not counted
		}
		rr.last = top
		if top != ev.Test {
			continue // subtests are not counted
		}
		switch ev.Action {
		case "run":
			rr.results[ev.Test] = ""
		case "pass", "fail", "skip":
			rr.results[ev.Test] = ev.Action
		}
	}
	if err := sc.Err(); err != nil {
		return rr, fmt.Errorf("reading test2json: %v", err)
	}
	return rr, nil
}

// listTests returns the top-level tests of a test binary that match run.
func listTests(dir, bin, run string) []string {
	cmd := exec.Command(bin, "-test.list", run)
	cmd.Dir = dir
	out, _ := cmd.Output() // a TestMain may fail after listing; the list is what counts
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "Test") && !strings.ContainsAny(line, " \t") {
			names = append(names, line)
		}
	}
	return names
}

// printOutput prints the output of the given top-level tests and their subtests from a test2json
// stream, indented.
func printOutput(path string, tests []string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var ev event
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Action != "output" {
			continue
		}
		top, _, _ := strings.Cut(ev.Test, "/")
		if slices.Contains(tests, top) {
			fmt.Print("    " + ev.Output)
		}
	}
	return sc.Err()
}

// readResults reads a file written by run's -out.
func readResults(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	results := make(map[string]string)
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		r, name, ok := strings.Cut(line, " ")
		if !ok {
			return nil, fmt.Errorf("%s: bad line %q", path, line)
		}
		results[name] = r
	}
	return results, nil
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(2)
}
