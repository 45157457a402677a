package generate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Sampling chooses each next token from the logits. The zero value is
// greedy decoding.
type Sampling struct {
	// Temperature divides the logits; 0 is greedy (the most likely token,
	// the first of equals, as torch.argmax).
	Temperature float64
	// TopK keeps the K most likely tokens (0: all).
	TopK int
	// TopP keeps the most likely tokens whose probabilities add up to at
	// least P (0 or 1: all).
	TopP float64
	// RepetitionPenalty divides the positive logits and multiplies the
	// negative ones of every token already in the sequence (prompt
	// included), as transformers' RepetitionPenaltyLogitsProcessor; 0 or 1
	// is none.
	RepetitionPenalty float64
	// Seed seeds the sequence's random numbers; with HasSeed false a random
	// seed is used. The same seed and batch composition give the same
	// tokens.
	Seed    uint64
	HasSeed bool
}

// validate checks the parameters' ranges.
func (s Sampling) validate() error {
	switch {
	case s.Temperature < 0 || math.IsNaN(s.Temperature) || math.IsInf(s.Temperature, 0):
		return fmt.Errorf("%w: temperature must be >= 0, got %v", ErrInvalidRequest, s.Temperature)
	case s.TopK < 0:
		return fmt.Errorf("%w: top_k must be >= 0, got %d", ErrInvalidRequest, s.TopK)
	case s.TopP < 0 || s.TopP > 1 || math.IsNaN(s.TopP):
		return fmt.Errorf("%w: top_p must be in [0, 1], got %v", ErrInvalidRequest, s.TopP)
	case s.RepetitionPenalty < 0 || math.IsNaN(s.RepetitionPenalty) || math.IsInf(s.RepetitionPenalty, 0):
		return fmt.Errorf("%w: repetition_penalty must be > 0, got %v", ErrInvalidRequest, s.RepetitionPenalty)
	}
	return nil
}

// sampler draws a sequence's tokens.
type sampler struct {
	params Sampling
	rng    *rand.Rand
	// scratch
	probs []float64
	order []int32
}

func newSampler(p Sampling) *sampler {
	seed := p.Seed
	if !p.HasSeed {
		seed = rand.Uint64()
	}
	return &sampler{params: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// next returns the next token from logits (one row, modified in place),
// given the tokens of the sequence so far.
func (s *sampler) next(logits []float32, seq []int64) int64 {
	p := s.params
	if rp := p.RepetitionPenalty; rp > 0 && rp != 1 {
		penalize(logits, seq, float32(rp))
	}
	if p.Temperature == 0 {
		return int64(argmax(logits))
	}
	return int64(s.draw(logits))
}

// penalize applies the repetition penalty once per distinct token of seq.
func penalize(logits []float32, seq []int64, rp float32) {
	seen := make(map[int64]bool, len(seq))
	for _, t := range seq {
		if seen[t] || t < 0 || t >= int64(len(logits)) {
			continue
		}
		seen[t] = true
		if logits[t] > 0 {
			logits[t] /= rp
		} else {
			logits[t] *= rp
		}
	}
}

// argmax returns the index of the largest value, the first of equals.
func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// draw samples from softmax(logits / temperature) restricted by top-k and
// top-p.
func (s *sampler) draw(logits []float32) int {
	p := s.params
	n := len(logits)
	s.order = slices.Grow(s.order[:0], n)[:n]
	for i := range s.order {
		s.order[i] = int32(i)
	}
	// Most likely first; ties keep the lower index first.
	slices.SortStableFunc(s.order, func(a, b int32) int {
		switch {
		case logits[a] > logits[b]:
			return -1
		case logits[a] < logits[b]:
			return 1
		}
		return 0
	})
	keep := n
	if p.TopK > 0 && p.TopK < keep {
		keep = p.TopK
	}
	s.probs = slices.Grow(s.probs[:0], keep)[:keep]
	top := float64(logits[s.order[0]])
	var sum float64
	for i := range keep {
		e := math.Exp((float64(logits[s.order[i]]) - top) / p.Temperature)
		s.probs[i] = e
		sum += e
	}
	if p.TopP > 0 && p.TopP < 1 {
		var cum float64
		for i := range keep {
			cum += s.probs[i] / sum
			if cum >= p.TopP {
				keep = i + 1
				break
			}
		}
		sum = 0
		for i := range keep {
			sum += s.probs[i]
		}
	}
	u := s.rng.Float64() * sum
	for i := range keep {
		u -= s.probs[i]
		if u < 0 {
			return int(s.order[i])
		}
	}
	return int(s.order[keep-1])
}
