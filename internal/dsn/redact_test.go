package dsn

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

func TestRedactRemovesEveryFormOfThePassword(t *testing.T) {
	for _, tc := range []struct{ dsn, msg string }{
		{"postgres://app:pw%2Fx@db:bad/shop", `parse "postgres://app:pw%2Fx@db:bad/shop": invalid port; pw/x`},
		{"host=db password='se cret' user=u", "bad se cret"},
		{"host=db password=plain user=u", "bad plain"},
		{"postgres://db/shop?password=qs&x=1", "bad qs"},
		{"app:mysql-pw@tcp(db)/shop", "bad mysql-pw"},
	} {
		got := Redact(tc.msg, tc.dsn)
		for _, secret := range []string{"pw%2Fx", "pw/x", "se cret", "plain", "qs", "mysql-pw"} {
			if strings.Contains(got, secret) {
				t.Errorf("Redact(%q, %q) = %q: still contains %q", tc.msg, tc.dsn, got, secret)
			}
		}
	}
}

func TestRedactDSNReplacesEveryPasswordValue(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://app:s3cr3t-pw@db/shop?sslmode=disable", "postgres://app:xxxxx@db/shop?sslmode=disable"},
		{"postgres://app@db/shop?password=s3cr3t-pw&x=1", "postgres://app@db/shop?password=xxxxx&x=1"},
		{"host=db password='se cret pw' user=u", "host=db password=xxxxx user=u"},
		{"host=db sslpassword = s3cr3t-pw user=u", "host=db sslpassword = xxxxx user=u"},
		{"app:s3cr3t-pw@tcp(db)/shop?parseTime=true", "app:xxxxx@tcp(db)/shop?parseTime=true"},
		{"app:Long-Secret@w0rd@tcp(db)/shop", "app:xxxxx@tcp(db)/shop"},
		{"host=db user=u", "host=db user=u"},
		{":memory:", ":memory:"},
	} {
		if got := RedactDSN(tc.dsn); got != tc.want {
			t.Errorf("RedactDSN(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
	}
}

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

// Redacting a hostile DSN, or a message against it, costs memory in proportion to its length,
// however many '@' it holds: every parse or connect error and every printed Config pays for it.
func TestRedactionCostIsLinearInTheDSN(t *testing.T) {
	const perByte = 200
	for _, kb := range []int{2, 8} {
		dsn := manyAtDSN(kb << 10)
		for what, f := range map[string]func(){
			"RedactDSN": func() { _ = RedactDSN(dsn) },
			"Redact":    func() { _ = Redact(dsn, dsn) },
		} {
			if got := allocatedBytes(f); got > perByte*uint64(len(dsn)) {
				t.Errorf("%s of a %d-byte DSN allocated %d bytes (%d per byte), want at most %d per byte",
					what, len(dsn), got, got/uint64(len(dsn)), perByte)
			}
		}
	}
}

func BenchmarkRedactDSN(b *testing.B) {
	for _, kb := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("%dKB", kb), func(b *testing.B) {
			dsn := manyAtDSN(kb << 10)
			b.ReportAllocs()
			for b.Loop() {
				_ = RedactDSN(dsn)
			}
		})
	}
}
