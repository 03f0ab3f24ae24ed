package drivers

import (
	"context"
	"errors"
	"testing"

	"github.com/gatedsql/gated/internal/fakedb"
)

// TestQueriesOfTheSeamRunOnEveryKindOfDriver: the statements this package runs itself (the MySQL
// connector's and killer's) run as database/sql would run them, on a driver with the
// context-aware interfaces and on one with only driver.Conn, whose statement is prepared for the
// one use and closed with its rows.
func TestQueriesOfTheSeamRunOnEveryKindOfDriver(t *testing.T) {
	ctx := context.Background()
	for _, legacy := range []bool{false, true} {
		var opts []fakedb.Option
		if legacy {
			opts = append(opts, fakedb.Legacy())
		}
		d := fakedb.New(opts...)
		dc, err := d.SQLDriver().Open("")
		if err != nil {
			t.Fatal(err)
		}
		if v, err := queryInts(ctx, dc, "SELECT 7", 0); err != nil || len(v) != 1 || v[0] != 7 {
			t.Errorf("legacy %v: queryInts(SELECT 7) = %v, %v; want [7]", legacy, v, err)
		}
		if _, err := queryInts(ctx, dc, "SELECT 7", 1); err == nil {
			t.Errorf("legacy %v: queryInts of a column the row lacks succeeded", legacy)
		}
		if err := execOn(ctx, dc, "SET x = 1"); err != nil {
			t.Errorf("legacy %v: execOn: %v", legacy, err)
		}
		var fe *fakedb.Error
		if err := execOn(ctx, dc, "FAIL no"); !errors.As(err, &fe) {
			t.Errorf("legacy %v: execOn(FAIL): %v, want the driver's error", legacy, err)
		}
		if s := d.Stats(); s.StmtsOpen != 0 || s.RowsOpen != 0 {
			t.Errorf("legacy %v: %d statements and %d rows left open", legacy, s.StmtsOpen, s.RowsOpen)
		}
		if s := d.Stats(); legacy && s.Prepares == 0 {
			t.Error("the driver with only driver.Conn ran the statements without preparing them")
		}
		dc.Close()
	}
}

// TestNewReportsAnUnregisteredDriverAsASettingError: the root turns it into its DSN error of
// gate_driver.
func TestNewReportsAnUnregisteredDriverAsASettingError(t *testing.T) {
	_, _, err := New("no-such-driver", "", Options{})
	var se *SettingError
	if !errors.As(err, &se) || se.Setting != SettingDriver {
		t.Fatalf("New of an unregistered driver: %v, want a SettingError of SettingDriver", err)
	}
}
