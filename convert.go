package gated

import (
	"database/sql/driver"
	"errors"
	"fmt"
)

// The virtual connection accepts every argument unconverted (its CheckNamedValue returns nil),
// because database/sql converts arguments before the connection is bound and so before the
// physical connection's own rules are known. convertArgs then applies those rules, with the
// algorithm of database/sql's driverArgsConnLocked: the statement's NamedValueChecker or else the
// connection's, the statement's ColumnConverter, then driver.DefaultParameterConverter;
// driver.ErrRemoveArgument drops an argument. pgx accepts every type, so for it this is a loop of
// nil checks and allocates nothing.

// convertArgs converts args in place for physical connection ci and statement si (nil outside a
// prepared statement) and returns the (possibly shorter) slice.
func convertArgs(ci driver.Conn, si driver.Stmt, args []driver.NamedValue) ([]driver.NamedValue, error) {
	if len(args) == 0 {
		return args, nil
	}
	nvc, ok := si.(driver.NamedValueChecker)
	if !ok {
		nvc, _ = ci.(driver.NamedValueChecker)
	}
	var cc ccChecker
	if si != nil {
		cc.want = si.NumInput()
		cc.cci, _ = si.(driver.ColumnConverter) //nolint:staticcheck // honoured as database/sql does
	} else {
		cc.want = -1
	}
	out := args[:0]
	for i := range args {
		nv := args[i]
		checker := defaultCheckNamedValue
		nextCC := false
		switch {
		case nvc != nil:
			nextCC = cc.cci != nil
			checker = nvc.CheckNamedValue
		case cc.cci != nil:
			checker = cc.CheckNamedValue
		}
	next:
		switch err := checker(&nv); err {
		case nil:
			out = append(out, nv)
		case driver.ErrRemoveArgument:
		case driver.ErrSkip:
			if nextCC {
				nextCC = false
				checker = cc.CheckNamedValue
			} else {
				checker = defaultCheckNamedValue
			}
			goto next
		default:
			return nil, fmt.Errorf("sql: converting argument %s type: %w", describeNamedValue(&nv), err)
		}
	}
	return out, nil
}

func defaultCheckNamedValue(nv *driver.NamedValue) (err error) {
	nv.Value, err = driver.DefaultParameterConverter.ConvertValue(nv.Value)
	return err
}

// ccChecker adapts a statement's driver.ColumnConverter, as database/sql's type of that name.
type ccChecker struct {
	cci  driver.ColumnConverter //nolint:staticcheck // see convertArgs
	want int
}

func (c ccChecker) CheckNamedValue(nv *driver.NamedValue) error {
	if c.cci == nil {
		return driver.ErrSkip
	}
	index := nv.Ordinal - 1
	if c.want >= 0 && c.want <= index {
		return nil
	}
	if vr, ok := nv.Value.(driver.Valuer); ok {
		sv, err := vr.Value()
		if err != nil {
			return err
		}
		if !driver.IsValue(sv) {
			return fmt.Errorf("non-subset type %T returned from Value", sv)
		}
		nv.Value = sv
	}
	arg := nv.Value
	var err error
	nv.Value, err = c.cci.ColumnConverter(index).ConvertValue(arg)
	if err != nil {
		return err
	}
	if !driver.IsValue(nv.Value) {
		return fmt.Errorf("driver ColumnConverter error converted %T to unsupported type %T", arg, nv.Value)
	}
	return nil
}

func describeNamedValue(nv *driver.NamedValue) string {
	if len(nv.Name) == 0 {
		return fmt.Sprintf("$%d", nv.Ordinal)
	}
	return fmt.Sprintf("with name %q", nv.Name)
}

// namedValueToValue converts for drivers that take []driver.Value, refusing named arguments as
// database/sql does.
func namedValueToValue(named []driver.NamedValue) ([]driver.Value, error) {
	vals := make([]driver.Value, len(named))
	for i, nv := range named {
		if len(nv.Name) > 0 {
			return nil, errors.New("sql: driver does not support the use of Named Parameters")
		}
		vals[i] = nv.Value
	}
	return vals, nil
}
