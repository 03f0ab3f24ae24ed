package main

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"testing"
)

// readmeMarker precedes the README's Quick start code block, which must be main.go verbatim.
const readmeMarker = "<!-- examples/quickstart/main.go -->\n```go\n"

// TestReadmeQuickStartIsThisProgram: the README's Quick start is this file byte for byte, so
// that what a newcomer copies is what CI compiles.
func TestReadmeQuickStartIsThisProgram(t *testing.T) {
	readme := readFile(t, "../../README.md")
	program := readFile(t, "main.go")

	i := bytes.Index(readme, []byte(readmeMarker))
	if i < 0 {
		t.Fatalf("README.md has no %q before its Quick start code block", readmeMarker)
	}
	block := readme[i+len(readmeMarker):]
	end := bytes.Index(block, []byte("\n```\n"))
	if end < 0 {
		t.Fatal("README.md: the Quick start code block does not end")
	}
	block = block[:end+1]
	if !bytes.Equal(block, program) {
		t.Errorf("README.md's Quick start differs from examples/quickstart/main.go; copy the file into the README.\nREADME:\n%s\nmain.go:\n%s", block, program)
	}
}

// TestReadmeTestCommandIsCIs: the README's command for the whole test suite is the one .ci/run
// runs.
func TestReadmeTestCommandIsCIs(t *testing.T) {
	readme := readFile(t, "../../README.md")
	ci := readFile(t, "../../.ci/run")

	var cmd string
	sc := bufio.NewScanner(bytes.NewReader(ci))
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "go test ") {
			if cmd != "" {
				t.Fatalf(".ci/run runs two go test commands: %q and %q", cmd, line)
			}
			cmd = line
		}
	}
	if cmd == "" {
		t.Fatal(".ci/run runs no line starting with \"go test \"")
	}
	if want := "```sh\n" + cmd + "\n```\n"; !bytes.Contains(readme, []byte(want)) {
		t.Errorf("README.md does not show .ci/run's test command as a shell block:\n%s", want)
	}
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
