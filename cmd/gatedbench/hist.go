package main

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// histSubBits sets the precision of a histogram: every power-of-two range of durations is split
// into 2^histSubBits buckets, so a reported quantile is within 1/64 (1.6 %) of the true value.
const histSubBits = 6

const (
	histSub     = 1 << histSubBits
	histMaxBits = 40 // durations up to 2^40 ns (about 18 minutes); longer ones land in the last bucket
	histBuckets = histSub + (histMaxBits-histSubBits)*histSub
)

// A histogram counts durations in log-linear buckets (HDR-like): recording is one index
// computation and one increment, with no allocation, so the recorder does not dominate the
// operations it measures. Its zero value is empty and ready to use.
//
// record is for a histogram owned by one goroutine; recordAtomic may be called concurrently (and
// must then be the only way the histogram is written until the writers are done).
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
}

// histIndex returns the bucket of a duration of v nanoseconds.
func histIndex(v uint64) int {
	if v < histSub {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1
	i := histSub + shift*histSub + int(v>>shift) - histSub
	return min(i, histBuckets-1)
}

// histValue returns the midpoint of bucket i, in nanoseconds.
func histValue(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	shift := (i - histSub) / histSub
	m := uint64(histSub + (i-histSub)%histSub)
	lo := m << shift
	return lo + (uint64(1)<<shift)/2
}

func (h *histogram) record(d time.Duration) {
	h.counts[histIndex(uint64(max(d, 0)))]++
	h.n++
}

func (h *histogram) recordAtomic(d time.Duration) {
	atomic.AddUint64(&h.counts[histIndex(uint64(max(d, 0)))], 1)
	atomic.AddUint64(&h.n, 1)
}

// merge adds o's counts to h.
func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

func (h *histogram) reset() { *h = histogram{} }

// count returns the number of recorded durations.
func (h *histogram) count() uint64 { return h.n }

// quantile returns the q-quantile (0 < q ≤ 1) of the recorded durations, or 0 when there are
// none.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(histValue(i))
		}
	}
	return time.Duration(histValue(histBuckets - 1))
}
