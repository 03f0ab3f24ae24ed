package gated

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The values of the gate_ keys as a DSN spells them: how set reads them and get writes them
// back, and the checks of the values that are more than a number or a duration. What the values
// do is elsewhere: the workloads' gates in workload.go, the statement and lock timeouts in
// timeout.go.

// parseCount reads an integer of at least least.
func parseCount(value string, least int) (int, error) {
	n, err := strconv.Atoi(value)
	if err != nil {
		// strconv's own error would repeat the value; keep only its reason.
		var ne *strconv.NumError
		if errors.As(err, &ne) {
			err = ne.Err
		}
		return 0, fmt.Errorf("invalid value %s: want an integer >= %d: %w", shownValue(value), least, err)
	}
	if n < least {
		return 0, fmt.Errorf("invalid value %s: want an integer >= %d", shownValue(value), least)
	}
	return n, nil
}

// parseCountOrNone reads a count whose 0 means none: the Config stores that as None, its zero
// being the default.
func parseCountOrNone(value string) (int, error) {
	n, err := parseCount(value, 0)
	if err == nil && n == 0 {
		n = None
	}
	return n, err
}

// parseDuration reads a Go duration of at least 0.
func parseDuration(value string) (time.Duration, error) {
	d, err := time.ParseDuration(value)
	if err != nil {
		return 0, fmt.Errorf("invalid value %s: want a Go duration such as 250ms or 2m", shownValue(value))
	}
	if d < 0 {
		return 0, fmt.Errorf("invalid value %s: want a duration >= 0", shownValue(value))
	}
	return d, nil
}

// parsePositiveDuration reads a duration that must be more than 0.
func parsePositiveDuration(value string) (time.Duration, error) {
	d, err := parseDuration(value)
	if err == nil && d == 0 {
		err = fmt.Errorf("invalid value %s: want a duration > 0", shownValue(value))
	}
	return d, err
}

// parseDurationOrNone reads a duration whose 0 means none, stored as None.
func parseDurationOrNone(value string) (time.Duration, error) {
	d, err := parseDuration(value)
	if err == nil && d == 0 {
		d = None
	}
	return d, err
}

// parseTimeout reads gate_lock_timeout: "off", 0 or a duration.
func parseTimeout(value string) (time.Duration, error) {
	if value == "off" {
		return 0, nil
	}
	d, err := parseDuration(value)
	if err != nil {
		return 0, fmt.Errorf("invalid value %s: want \"off\" or a Go duration such as 250ms", shownValue(value))
	}
	return d, nil
}

// parseStatementTimeout reads gate_statement_timeout: "off", 0, a duration, "deadline" or
// "deadline:<dur>".
func parseStatementTimeout(value string) (time.Duration, bool, error) {
	rest, deadline := strings.CutPrefix(value, "deadline")
	if !deadline {
		d, err := parseTimeout(value)
		if err != nil {
			return 0, false, errors.New(strings.Replace(err.Error(), `"off" or`, `"off", "deadline", "deadline:<duration>" or`, 1))
		}
		return d, false, nil
	}
	if rest == "" {
		return 0, true, nil
	}
	d, err := parseDuration(strings.TrimPrefix(rest, ":"))
	if err != nil || rest[0] != ':' || d == 0 {
		return 0, false, fmt.Errorf("invalid value %s: want \"deadline:\" and a Go duration > 0 such as 2s", shownValue(value))
	}
	return d, true, nil
}

// formatStatementTimeout writes what parseStatementTimeout reads back.
func formatStatementTimeout(d time.Duration, deadline bool) string {
	switch {
	case !deadline:
		return d.String()
	case d == 0:
		return "deadline"
	}
	return "deadline:" + d.String()
}

// checkQueueOrder checks a value of gate_queue_order.
func checkQueueOrder(v string) error {
	if v != QueueFIFO && v != QueueAdaptive {
		return fmt.Errorf("invalid value %s: want %q or %q", shownValue(v), QueueFIFO, QueueAdaptive)
	}
	return nil
}

// checkPooler checks a value of gate_pooler.
func checkPooler(v string) error {
	if v != "none" && v != PoolerTransaction {
		return fmt.Errorf("invalid value %s: want \"none\" or %q", shownValue(v), PoolerTransaction)
	}
	return nil
}

// parseWorkloads reads gate_workloads: "name:B[:Q[:wait[:option...]]],...", the options being
// "auto" and "lend"; an empty Q or wait before an option is the default. A Q or wait not given is zero,
// the default, and a 0 is None, as for the default gate's keys.
func parseWorkloads(value string) ([]Workload, error) {
	var ws []Workload
	for item := range strings.SplitSeq(value, ",") {
		fields := strings.Split(item, ":")
		if len(fields) < 2 {
			return nil, fmt.Errorf("workload %s: want name:B[:Q[:wait[:auto][:lend]]]", shownValue(item))
		}
		w := Workload{Name: fields[0]}
		var err error
		if w.Concurrent, err = parseCount(fields[1], 1); err != nil {
			return nil, fmt.Errorf("workload %s: B: %w", shownValue(w.Name), err)
		}
		if len(fields) > 2 && fields[2] != "" {
			if w.Queue, err = parseCountOrNone(fields[2]); err != nil {
				return nil, fmt.Errorf("workload %s: Q: %w", shownValue(w.Name), err)
			}
		}
		if len(fields) > 3 && fields[3] != "" {
			if w.QueueWait, err = parseDurationOrNone(fields[3]); err != nil {
				return nil, fmt.Errorf("workload %s: wait: %w", shownValue(w.Name), err)
			}
		}
		for _, opt := range fields[min(len(fields), 4):] {
			switch {
			case opt == "auto" && !w.Auto:
				w.Auto = true
			case opt == "lend" && !w.Lend:
				w.Lend = true
			default:
				return nil, fmt.Errorf("workload %s: option %s: want auto or lend, each at most once", shownValue(w.Name), shownValue(opt))
			}
		}
		ws = append(ws, w)
	}
	if err := checkWorkloads(ws); err != nil {
		return nil, err
	}
	return ws, nil
}

// formatWorkloads writes ws, whose defaults are filled in, in the full form parseWorkloads reads
// back unchanged.
func formatWorkloads(ws []Workload) string {
	var b strings.Builder
	for i, w := range ws {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s:%d:%d:%s", w.Name, w.Concurrent, orZero(w.Queue), orZero(w.QueueWait))
		if w.Auto {
			b.WriteString(":auto")
		}
		if w.Lend {
			b.WriteString(":lend")
		}
	}
	return b.String()
}

// checkWorkloads validates ws, as given or as parseWorkloads read them; the caller names the key.
func checkWorkloads(ws []Workload) error {
	seen := make(map[string]bool, len(ws))
	for _, w := range ws {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("workload %s: "+format, append([]any{shownValue(w.Name)}, args...)...)
		}
		switch {
		case w.Name == "":
			return bad("empty name")
		case w.Name == DefaultWorkload:
			return bad("the name of the default gate, configured by gate_concurrent, gate_queue and gate_queue_wait")
		case !validWorkloadName(w.Name):
			return bad("a name has only letters, digits, '_', '-' and '.'")
		case seen[w.Name]:
			return bad("named twice")
		case w.Concurrent < 1:
			return bad("B is %d, want at least 1", w.Concurrent)
		case w.Queue < 0 && w.Queue != None:
			return bad("Q is %d, want at least 0 (0 is the default, B; gated.None no queue)", w.Queue)
		case w.QueueWait < 0 && w.QueueWait != None:
			return bad("wait %v is negative (0 is the default, gated.None no wait)", w.QueueWait)
		}
		seen[w.Name] = true
	}
	return nil
}

func validWorkloadName(s string) bool {
	for _, r := range s {
		if !(r == '_' || r == '-' || r == '.' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') {
			return false
		}
	}
	return true
}
