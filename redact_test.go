package gated

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// manyAtDSN returns a URL DSN of about n bytes whose application_name is full of '@': every
// '@' after "app:" may end a hand-written, unescaped password, so each is a place the redactor
// must consider.
func manyAtDSN(n int) string {
	const head, tail = "postgres://app:s3cr3t-pw@db.example/shop?sslmode=disable&application_name=", "&gate_concurrent=8"
	var b strings.Builder
	b.WriteString(head)
	for b.Len()+len(tail) < n {
		b.WriteString("svc@host")
	}
	b.WriteString(tail)
	return b.String()
}

func BenchmarkConfigString(b *testing.B) {
	for _, kb := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("%dKB", kb), func(b *testing.B) {
			cfg, err := ParseDSN(manyAtDSN(kb << 10))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = cfg.String()
			}
		})
	}
}

// allocatedBytes returns the bytes f allocates, the least of a few runs: another goroutine's
// allocations only ever add to a run.
func allocatedBytes(f func()) uint64 {
	least := ^uint64(0)
	var before, after runtime.MemStats
	for range 3 {
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// Printing a Config costs memory in proportion to its DSN, however many '@' it holds: every
// parse or connect error and every printed Config pays for it.
func TestConfigStringCostIsLinearInTheDSN(t *testing.T) {
	const perByte = 200
	for _, kb := range []int{2, 8} {
		dsn := manyAtDSN(kb << 10)
		cfg, err := ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if got := allocatedBytes(func() { _ = cfg.String() }); got > perByte*uint64(len(dsn)) {
			t.Errorf("String of a %d-byte DSN allocated %d bytes (%d per byte), want at most %d per byte",
				len(dsn), got, got/uint64(len(dsn)), perByte)
		}
	}
}
