package withgorm_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/examples/internal/extest"
	"github.com/gatedsql/gated/examples/withgorm"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

func TestMain(m *testing.M) { extest.Main(m) }

type Product struct {
	ID    uint
	Code  string `gorm:"uniqueIndex"`
	Price int
}

// open opens the example's *gorm.DB on a fresh schema, with GORM's logger silenced (the tests
// provoke errors that it would print).
func open(t *testing.T, drv, params string) *gorm.DB {
	t.Helper()
	gdb, err := withgorm.Open(extest.DSN(t, drv, params), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	db, err := gdb.DB()
	if err != nil {
		t.Fatal(err)
	}
	extest.CheckQuiet(t, db)
	return gdb
}

// TestGORM runs GORM's everyday calls through gated on both inner drivers: AutoMigrate, Create,
// Find, and Transaction that commits and that rolls back.
func TestGORM(t *testing.T) {
	extest.ForEachDriver(t, func(t *testing.T, drv string) {
		gdb := open(t, drv, "gate_concurrent=4")
		if err := gdb.AutoMigrate(&Product{}); err != nil {
			t.Fatalf("AutoMigrate: %v", err)
		}
		// A second AutoMigrate reads the existing table's columns (see the package doc on DriverName).
		if err := gdb.AutoMigrate(&Product{}); err != nil {
			t.Fatalf("AutoMigrate again: %v", err)
		}

		if err := gdb.Create([]*Product{{Code: "D42", Price: 100}, {Code: "E7", Price: 250}}).Error; err != nil {
			t.Fatalf("Create: %v", err)
		}
		var cheap []Product
		if err := gdb.Where("price < ?", 200).Order("id").Find(&cheap).Error; err != nil {
			t.Fatalf("Find: %v", err)
		}
		if len(cheap) != 1 || cheap[0].Code != "D42" || cheap[0].ID == 0 {
			t.Fatalf("Find: %+v; want D42 alone, with its id", cheap)
		}

		err := gdb.Transaction(func(tx *gorm.DB) error {
			if err := tx.Model(&Product{}).Where("code = ?", "D42").Update("price", 90).Error; err != nil {
				return err
			}
			return tx.Create(&Product{Code: "F1", Price: 10}).Error
		})
		if err != nil {
			t.Fatalf("Transaction (commit): %v", err)
		}
		errAbort := errors.New("abort")
		err = gdb.Transaction(func(tx *gorm.DB) error {
			if err := tx.Where("1 = 1").Delete(&Product{}).Error; err != nil {
				return err
			}
			return errAbort
		})
		if !errors.Is(err, errAbort) {
			t.Fatalf("Transaction (rollback): %v; want the function's error", err)
		}

		var all []Product
		if err := gdb.Order("code").Find(&all).Error; err != nil {
			t.Fatalf("Find: %v", err)
		}
		var got []string
		for _, p := range all {
			got = append(got, p.Code)
		}
		if !slices.Equal(got, []string{"D42", "E7", "F1"}) || all[0].Price != 90 {
			t.Fatalf("after commit and rollback: %+v; want D42 (90), E7, F1", all)
		}
	})
}

// TestGORMRefusalIsGatedError checks that the gate's refusal reaches a GORM caller as gated's
// error: with B=1, Q=0 and the permit held by a GORM transaction, a Find outside it is refused.
func TestGORMRefusalIsGatedError(t *testing.T) {
	extest.ForEachDriver(t, func(t *testing.T, drv string) {
		gdb := open(t, drv, "gate_concurrent=1&gate_queue=0")
		if err := gdb.AutoMigrate(&Product{}); err != nil {
			t.Fatalf("AutoMigrate: %v", err)
		}
		err := gdb.Transaction(func(tx *gorm.DB) error {
			var n int64
			if err := tx.Model(&Product{}).Count(&n).Error; err != nil {
				return err
			}
			var ps []Product
			err := gdb.Find(&ps).Error // outside tx: needs a second permit
			if !gated.IsRejected(err) {
				t.Errorf("Find while the only permit is held: %v; want a gated refusal", err)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Transaction: %v", err)
		}
	})
}
