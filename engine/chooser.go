package engine

import (
	"slices"
	"sync"
	"time"
)

// chooser learns, for one executable, which of two ways to run its
// executions is faster: the base way (whole; serial) or the alternative
// (split across idle cores; with the CPU kernels' threads). The
// alternative is taken unless the base way measures wayBaseMargin faster:
// load from outside the server slows the ways that need every core at once
// more than the others, so on a shared machine the measurements lean
// towards the base way. Safe for concurrent use.
//
// It decides in episodes, never from runs far apart in time. An episode
// runs the two ways in alternating blocks of wayBlock runs (base, alt,
// base, alt, or starting with the way not chosen before), and compares the
// runs of each way measured in it; the first run of a block is not
// counted, since a run right after a run of the other way is slowed by it
// (a whole execution's large kernels leave OpenMP threads spinning for a
// while after them, which slows the next split one). On a VM whose cores
// are shared with other guests, a run's time moves by 1.5-2x for seconds
// at a time, and a decision that compared one way's runs from such a phase
// with the other's from a quiet one kept the wrong way until the next
// exploration (a batch of 8 run whole at 0.47 ms where split took 0.26).
//
// Between episodes the chosen way runs. A new episode begins after
// wayExplore runs (wayBaseExplore while the base way is chosen, see
// there), or sooner, once wayDriftMin runs have passed, when the chosen
// way's recent runs have moved by more than wayDrift from what the episode
// measured: the machine has changed, and the other way may now be the
// faster. Each episode that keeps the way chosen doubles both intervals,
// up to 2^wayMaxStreak times; one that changes it resets them. An episode
// costs half its runs on the slower way, and on a VM whose runs jump
// between two speeds the drift alone began one every 40 runs or so: 14% of
// the runs, enough to move a median. Before the first episode each way
// runs waySkip times uncounted (a shard's first runs on a new thread set
// up the kernels' per-thread state).
type chooser struct {
	mu      sync.Mutex
	seen    [2]int        // runs of the base (0) and alternative (1) way observed
	last    int           // the way of the last run observed
	decided bool          // an episode has ended
	alt     bool          // the way chosen by the last episode
	ref     time.Duration // what the last episode measured of that way
	streak  int           // episodes in a row that kept the way chosen, at most wayMaxStreak

	// The episode in progress, if episode: step counts the runs chosen in
	// it; n and runs hold each way's counted runs.
	episode bool
	step    int
	first   int // the way of the episode's first block
	n       [2]int
	runs    [2][2 * wayBlock]time.Duration

	// Between episodes: runs chosen since the last one, and the chosen
	// way's latest counted runs, a ring.
	since  int
	recent [wayWindow]time.Duration
	nrec   int
}

const (
	waySkip    = 4
	wayBlock   = 3
	wayEpisode = 4 * wayBlock
	wayExplore = 128
	// wayBaseExplore is wayExplore while the base way is chosen. The base
	// way runs on one core and does not see the load that slows the
	// alternative, so its times do not move when that load goes away:
	// drift cannot tell, and the episode has to come by itself.
	wayBaseExplore = 32
	wayWindow      = 8
	wayDriftMin    = 32
	// wayMaxStreak caps the doubling of the intervals between episodes.
	wayMaxStreak = 3
	// wayDrift: the chosen way's recent first quartile, as a multiple of
	// the episode's, beyond which (either way) a new episode begins.
	wayDrift = 1.2
	// wayBaseMargin: the base way is chosen only when its episode time is
	// under this fraction of the alternative's.
	wayBaseMargin = 0.9
)

// wayOf is the index of a way: 0 base, 1 alternative.
func wayOf(alt bool) int {
	if alt {
		return 1
	}
	return 0
}

// choose reports whether the next run should take the alternative way.
func (c *chooser) choose() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.seen[0] < waySkip:
		return false // uncounted first runs: base, then alternative
	case c.seen[1] < waySkip:
		return true
	case !c.decided && !c.episode:
		c.beginLocked(0)
	}
	if c.episode {
		if c.step >= 2*wayEpisode {
			// Observations went missing (failed runs): start over.
			c.beginLocked(c.first)
		}
		way := c.first
		if c.step < wayEpisode {
			way ^= (c.step / wayBlock) % 2
		} else {
			way ^= 1 // the last block's way until the episode's runs are in
		}
		c.step++
		return way == 1
	}
	c.since++
	explore := wayExplore
	if !c.alt {
		explore = wayBaseExplore
	}
	if c.since >= explore<<c.streak || (c.since >= wayDriftMin<<c.streak && c.driftLocked()) {
		c.beginLocked(wayOf(!c.alt))
		c.step++
		return !c.alt
	}
	return c.alt
}

// beginLocked starts an episode whose first block runs way first.
func (c *chooser) beginLocked(first int) {
	c.episode, c.step, c.first, c.n = true, 0, first, [2]int{}
}

// driftLocked reports whether the chosen way's latest runs have moved
// beyond wayDrift of the episode's measure.
func (c *chooser) driftLocked() bool {
	if c.nrec < wayWindow || c.ref <= 0 {
		return false
	}
	r := float64(lowQuartile(c.recent[:])) / float64(c.ref)
	return r > wayDrift || r < 1/wayDrift
}

// observe records how long a run took, on the alternative way or not.
func (c *chooser) observe(alt bool, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := wayOf(alt)
	c.seen[i]++
	switched := c.seen[0]+c.seen[1] > 1 && c.last != i
	c.last = i
	if switched || c.seen[i] <= waySkip {
		return
	}
	if c.episode {
		if c.n[i] < len(c.runs[i]) {
			c.runs[i][c.n[i]] = d
			c.n[i]++
		}
		if c.step >= wayEpisode && c.n[0] >= 2*(wayBlock-1) && c.n[1] >= 2*(wayBlock-1) {
			c.endLocked()
		}
		return
	}
	if c.decided && i == wayOf(c.alt) {
		c.recent[c.nrec%wayWindow] = d
		c.nrec++
	}
}

// endLocked decides from the episode's runs and goes back to the chosen
// way.
func (c *chooser) endLocked() {
	base, alt := lowQuartile(c.runs[0][:c.n[0]]), lowQuartile(c.runs[1][:c.n[1]])
	chosen := float64(base) >= wayBaseMargin*float64(alt)
	if c.decided && chosen == c.alt {
		c.streak = min(c.streak+1, wayMaxStreak)
	} else {
		c.streak = 0
	}
	c.alt = chosen
	c.ref = base
	if c.alt {
		c.ref = alt
	}
	c.decided, c.episode, c.since, c.nrec = true, false, 0, 0
}

// learned reports whether an episode has decided.
func (c *chooser) learned() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.decided
}

// altChosen reports whether the last episode chose the alternative way.
func (c *chooser) altChosen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.decided && c.alt
}

// observed returns how many runs of the base and the alternative way it
// observed.
func (c *chooser) observed() [2]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen
}

// lowQuartile returns the first quartile of ds (which it does not change).
func lowQuartile(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/4]
}
