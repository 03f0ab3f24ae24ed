package gated

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// A Config prints as its DSN with the passwords replaced, however fmt or slog is asked to print
// it; FormatDSN still returns the DSN itself.
func TestConfigPrintsWithoutThePassword(t *testing.T) {
	for _, tc := range []struct{ dsn, want, secret string }{
		{`host=db user=u password='se\'cr etWORD' gate_concurrent=4`, "gate_concurrent=4 host=db user=u password=xxxxx", "etWORD"},
		{"host=db password = s3cr3t-pw user=u", "host=db password = xxxxx user=u", "s3cr3t"},
		{"postgres://u:p%40ss-w0rd@db/x?sslmode=disable&gate_queue=3", "postgres://u:xxxxx@db/x?sslmode=disable&gate_queue=3", "w0rd"},
		{"postgres://db/x?password=abcd1&sslpassword=efgh2", "postgres://db/x?password=xxxxx&sslpassword=xxxxx", "efgh"},
		{"app:my-pw-42@tcp(db)/x?parseTime=true", "app:xxxxx@tcp(db)/x?parseTime=true", "pw-42"},
	} {
		cfg, err := ParseDSN(tc.dsn)
		if err != nil {
			t.Fatalf("ParseDSN(%q): %v", tc.dsn, err)
		}
		if got := cfg.String(); got != tc.want {
			t.Errorf("String of %q = %q, want %q", tc.dsn, got, tc.want)
		}
		if !strings.Contains(cfg.FormatDSN(), tc.secret) {
			t.Errorf("FormatDSN of %q = %q: lost the password", tc.dsn, cfg.FormatDSN())
		}
		var log bytes.Buffer
		slog.New(slog.NewJSONHandler(&log, nil)).Info("cfg", "config", cfg, "value", *cfg)
		for _, out := range []string{
			fmt.Sprint(cfg), fmt.Sprint(*cfg), fmt.Sprintf("%v %+v %#v", cfg, cfg, cfg),
			fmt.Sprintf("%v %+v %#v", *cfg, *cfg, *cfg), log.String(),
		} {
			if strings.Contains(out, tc.secret) || !strings.Contains(out, strings.ReplaceAll(tc.want, `"`, `\"`)) {
				t.Errorf("%q printed as %q, want %q and no password", tc.dsn, out, tc.want)
			}
		}
	}
}

func ExampleConfig_String() {
	cfg, err := ParseDSN("postgres://app:s3cr3t-pw@db.example/shop?sslmode=require&gate_concurrent=8")
	if err != nil {
		panic(err)
	}
	fmt.Println(cfg)
	// Output: postgres://app:xxxxx@db.example/shop?sslmode=require&gate_concurrent=8
}
