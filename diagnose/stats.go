package diagnose

import (
	"math"
	"slices"
	"time"
)

// RTTStats summarises round-trip samples.
type RTTStats struct {
	// Samples in the order they were taken.
	Samples                                    []time.Duration
	Min, P50, P90, P95, P99, Max, Mean, Jitter time.Duration // Jitter: mean absolute difference of consecutive samples
}

// NewRTTStats computes the summary of samples (nearest-rank percentiles).
func NewRTTStats(samples []time.Duration) RTTStats {
	s := RTTStats{Samples: slices.Clone(samples)}
	if len(samples) == 0 {
		return s
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	s.Min, s.Max = sorted[0], sorted[len(sorted)-1]
	s.P50 = percentile(sorted, 50)
	s.P90 = percentile(sorted, 90)
	s.P95 = percentile(sorted, 95)
	s.P99 = percentile(sorted, 99)
	var sum, jit time.Duration
	for i, d := range samples {
		sum += d
		if i > 0 {
			jit += (d - samples[i-1]).Abs()
		}
	}
	s.Mean = sum / time.Duration(len(samples))
	if len(samples) > 1 {
		s.Jitter = jit / time.Duration(len(samples)-1)
	}
	return s
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Bucket is one bar of a histogram: samples in [Lo, Hi), the last bucket
// including Hi.
type Bucket struct {
	Lo, Hi time.Duration
	Count  int
}

// Histogram spreads the samples over n equal-width buckets between Min and
// Max (one bucket when they are all equal).
func (s RTTStats) Histogram(n int) []Bucket {
	if len(s.Samples) == 0 {
		return nil
	}
	if n < 1 {
		n = 1
	}
	span := s.Max - s.Min
	if span <= 0 {
		return []Bucket{{Lo: s.Min, Hi: s.Max, Count: len(s.Samples)}}
	}
	width := (span + time.Duration(n) - 1) / time.Duration(n)
	out := make([]Bucket, n)
	for i := range out {
		out[i].Lo = s.Min + time.Duration(i)*width
		out[i].Hi = out[i].Lo + width
	}
	out[n-1].Hi = s.Max
	for _, d := range s.Samples {
		i := int((d - s.Min) / width)
		if i >= n {
			i = n - 1
		}
		out[i].Count++
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	return percentile(sorted, 50)
}

func medianInt(xs []int64) int64 {
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	if len(sorted) == 0 {
		return 0
	}
	return sorted[(len(sorted)-1)/2]
}
