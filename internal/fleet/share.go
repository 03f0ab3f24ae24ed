package fleet

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The share arithmetic of gate_fleet=on: pure functions, no I/O. A share is what one instance
// holds of the fleet's totals; the totals are a share too, the whole.

// A Share is a number of physical connections and, for each gate (the default workload first,
// then the workloads in the instance's Config order), execution and admission permits beyond them.
//
// Conns counts the instance's working connections, its pool's: its lease connection is one more,
// outside the share and outside gate_max_conns (a fleet of n instances holds at most the total P
// working connections and n lease connections), so that the lease costs the fleet no working
// connection. An instance with a share of Conns c runs its pool with at most c physical
// connections, and its gates' B add up to at most c. An instance is seated when its share has a
// connection; a seated instance always has a permit (see fairShare). An instance without a seat
// keeps no connection open (see member.go) and refuses every operation.
type Share struct {
	Conns      int
	Concurrent []int // B per gate
	Queue      []int // Q per gate
}

// ZeroShare returns the share of n gates that holds nothing: a newcomer's, until it has seen
// the others.
func ZeroShare(gates int) Share {
	return Share{Concurrent: make([]int, gates), Queue: make([]int, gates)}
}

// Clone returns a copy of s that shares no slice with it.
func (s Share) Clone() Share {
	return Share{Conns: s.Conns, Concurrent: append([]int(nil), s.Concurrent...), Queue: append([]int(nil), s.Queue...)}
}

// DataConns is how many physical connections the pool may open under s: all of them, the lease
// connection being outside the share.
func (s Share) DataConns() int { return max(s.Conns, 0) }

// seated reports whether s is a share an instance can run an operation with: a connection and a
// permit (a grant may give connections before permits).
func (s Share) seated() bool { return s.Conns > 0 && Sum(s.Concurrent) > 0 }

// Equal reports whether s and o are the same share.
func (s Share) Equal(o Share) bool {
	return s.Conns == o.Conns && slices.Equal(s.Concurrent, o.Concurrent) && slices.Equal(s.Queue, o.Queue)
}

// Within reports whether s is nowhere above o.
func (s Share) Within(o Share) bool {
	if s.Conns > o.Conns || len(s.Concurrent) != len(o.Concurrent) || len(s.Queue) != len(o.Queue) {
		return false
	}
	for i := range s.Concurrent {
		if s.Concurrent[i] > o.Concurrent[i] || s.Queue[i] > o.Queue[i] {
			return false
		}
	}
	return true
}

// meet returns the share that is in every place the smaller of s and o: what an instance
// holding s may keep on its way to o. s and o have the same gates.
func (s Share) meet(o Share) Share {
	m := s.Clone()
	m.Conns = min(m.Conns, o.Conns)
	for i := range m.Concurrent {
		m.Concurrent[i] = min(m.Concurrent[i], o.Concurrent[i])
		m.Queue[i] = min(m.Queue[i], o.Queue[i])
	}
	return m
}

// fit returns s lowered until it can be run: the gates' B add up to at most DataConns (taken
// from the last workloads first), and a gate without execution permits has no queue either, so
// that it refuses at once instead of letting callers wait for a permit that cannot come.
func (s Share) fit() Share {
	f := s.Clone()
	room := f.DataConns()
	for i := range f.Concurrent {
		f.Concurrent[i] = min(max(f.Concurrent[i], 0), room)
		room -= f.Concurrent[i]
		if f.Concurrent[i] == 0 {
			f.Queue[i] = 0
		}
		f.Queue[i] = max(f.Queue[i], 0)
	}
	f.Conns = max(f.Conns, 0)
	return f
}

// Join returns the share that is in every place the larger of s and o: what a member asks for
// when it holds s and its fair share is o.
func (s Share) Join(o Share) Share {
	j := s.Clone()
	j.Conns = max(j.Conns, o.Conns)
	for i := range j.Concurrent {
		j.Concurrent[i] = max(j.Concurrent[i], o.Concurrent[i])
		j.Queue[i] = max(j.Queue[i], o.Queue[i])
	}
	return j
}

// GrowToward returns what a member holding s (fitted) can run of a grant g: s raised toward g
// wherever g is larger, fitted, and nowhere below s, so that growing never lowers a gate.
func (s Share) GrowToward(g Share) Share {
	r := s.Clone()
	r.Conns = max(s.Conns, g.Conns)
	room := r.DataConns() - Sum(s.Concurrent)
	for i := range r.Concurrent {
		add := min(max(g.Concurrent[i]-s.Concurrent[i], 0), max(room, 0))
		r.Concurrent[i] += add
		room -= add
		if r.Concurrent[i] > 0 {
			r.Queue[i] = max(s.Queue[i], g.Queue[i])
		}
	}
	return r
}

// fairShare returns the share of the member at rank (0 = the earliest to join) of a fleet of n
// members with totals t, before fit. The seats are the first min(n, t.Conns, ΣB) ranks, so that
// every seated member can have a connection and a permit; the others get nothing. Each total is
// divided among the seats as evenly as integers allow: every seat gets t/seats, and the
// remainder goes one each to consecutive ranks, starting for each gate where the previous gate's
// remainder stopped, so that no member collects every gate's extra and every seat's permits add
// up to at least one. The shares of one total add up to that total exactly, so the fleet is never
// above it.
func fairShare(t Share, n, rank int) Share {
	s := ZeroShare(len(t.Concurrent))
	seats := min(n, max(t.Conns, 0))
	if b := Sum(t.Concurrent); b > 0 {
		seats = min(seats, b)
	}
	if seats <= 0 || rank < 0 || rank >= seats {
		return s
	}
	split := func(total, offset int) int {
		if total <= 0 {
			return 0
		}
		v := total / seats
		if (rank-offset%seats+seats)%seats < total%seats {
			v++
		}
		return v
	}
	s.Conns = split(t.Conns, 0)
	// The extra permits start at rank 0 like the extra connections: the members with an extra
	// connection have the room for them.
	off := 0
	for i := range t.Concurrent {
		s.Concurrent[i] = split(t.Concurrent[i], off)
		off += max(t.Concurrent[i], 0) % seats
	}
	off = 0
	for i := range t.Queue {
		s.Queue[i] = split(t.Queue[i], off)
		off += max(t.Queue[i], 0) % seats
	}
	return s
}

// TargetShare is what the member at rank of n should hold: its fair share, fitted.
func TargetShare(t Share, n, rank int) Share { return fairShare(t, n, rank).fit() }

// SQLInts writes v as a PostgreSQL array literal, "{1,2}".
func SQLInts(v []int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, x := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(x))
	}
	b.WriteByte('}')
	return b.String()
}

// ParseInts reads a comma-separated list of integers, as array_to_string writes it.
func ParseInts(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	v := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("gated: fleet table: %q is not a list of integers", s)
		}
		v[i] = n
	}
	return v, nil
}

// Sum returns the sum of v.
func Sum(v []int) int {
	var n int
	for _, x := range v {
		n += x
	}
	return n
}

// String formats s for logs: "conns=5 concurrent=[4 1] queue=[4 1]".
func (s Share) String() string {
	return fmt.Sprintf("conns=%d concurrent=%v queue=%v", s.Conns, s.Concurrent, s.Queue)
}
