package engine

import (
	"fmt"
	"time"
)

// XLA CPU programs, and the kernels they call, use a second core poorly at
// the sizes a server runs (a batch of 8 images runs about as fast on one
// core as on two; docs/BENCHMARKS.md). An execution whose rows are
// independent can instead run as parts, one per idle core, at once; and a
// whole execution can run its CPU kernels on every thread or on its own.
// Which way is faster depends on the program and the machine, so a Strategy
// chooses per execution and learns from the times.

// Way is how one execution runs.
type Way struct {
	// Split runs the execution as parts at once, each on one thread.
	Split bool
	// Threads, for a whole execution, is the most threads its CPU kernels
	// run on; 0 is no limit.
	Threads int
	// learn names the chooser of the Strategy that chose this way, which
	// Observe feeds.
	learn learner
}

type learner uint8

const (
	learnNone learner = iota
	learnSplit
	learnThreads
)

// Strategy chooses how each execution of one executable runs on the device,
// and learns from how long they take. Implementations are safe for
// concurrent use.
type Strategy interface {
	// Parts returns into how many parts, at most, an execution beginning
	// under l may split (below 2: it runs whole).
	Parts(l Load) int
	// Choose returns the way an execution beginning under l runs; split
	// says the caller has parts for it.
	Choose(l Load, split bool) Way
	// Observe records how long an execution run the way Choose said
	// took.
	Observe(w Way, d time.Duration)
}

// SplitPolicy says when an execution's rows run as parts on idle CPU cores.
type SplitPolicy string

// Split policies.
const (
	// SplitAuto splits an execution of several rows when no other
	// execution is running and the measurements say splitting is faster;
	// with the CPU kernel library, a whole execution runs its kernels on
	// its share of the cores, or, run alone, the way measured faster (the
	// default).
	SplitAuto SplitPolicy = "auto"
	// SplitOff runs every execution whole.
	SplitOff SplitPolicy = "off"
	// SplitAlways splits every execution that can split across the cores
	// no other execution holds, whatever the measurements say (for tests
	// and A/B benchmarks).
	SplitAlways SplitPolicy = "always"
)

// ParseSplitPolicy reads a split policy ("" is SplitAuto).
func ParseSplitPolicy(s string) (SplitPolicy, error) {
	switch p := SplitPolicy(s); p {
	case "":
		return SplitAuto, nil
	case SplitAuto, SplitOff, SplitAlways:
		return p, nil
	}
	return "", fmt.Errorf("split batches %q: want auto, off or always", s)
}

// NewStrategy returns a strategy for one executable's executions under
// policy p: whole executions only off the CPU or with SplitOff.
func (e *Engine) NewStrategy(p SplitPolicy) Strategy {
	switch {
	case p == SplitOff || !e.cpu:
		return whole{}
	case p == SplitAlways:
		return always{}
	}
	return &Auto{kernels: e.kernels}
}

// whole runs every execution whole, on as many threads as its kernels
// want.
type whole struct{}

func (whole) Parts(Load) int                 { return 0 }
func (whole) Choose(Load, bool) Way          { return Way{} }
func (whole) Observe(Way, time.Duration)     {}
func (always) Parts(l Load) int              { return l.Cores - l.Others }
func (always) Choose(_ Load, split bool) Way { return Way{Split: split} }
func (always) Observe(Way, time.Duration)    {}

// always splits every execution it can.
type always struct{}

// Auto is SplitAuto's strategy. It learns two choices with a chooser each:
// whether executions that can split run faster split or whole; and, with
// the CPU kernel library, whether a whole execution run alone is faster
// with the kernels' threads or serial (those threads pay on a machine whose
// cores are the server's, and cost more than they save where a core is
// shared). A whole execution that begins while others run has its kernels
// use its share of the cores (on two cores with one other: serial), the
// other executions' threads holding the rest. Timing whole executions, not
// kernels, counts what a spinning helper thread takes from the rest of the
// program.
type Auto struct {
	kernels bool
	split   chooser
	threads chooser
}

// Parts is every core when no other execution runs, else none: the other
// cores are busy, and parts would only queue.
func (a *Auto) Parts(l Load) int {
	if l.Others > 0 {
		return 0
	}
	return l.Cores
}

// Choose asks the split chooser when the execution can split, else the
// threads chooser when the execution runs alone with the kernel library.
func (a *Auto) Choose(l Load, split bool) Way {
	switch {
	case split:
		return Way{Split: a.split.choose(), learn: learnSplit}
	case !a.kernels:
		return Way{}
	case l.Others > 0:
		return Way{Threads: coreShare(l.Cores, l.Others)}
	case a.threads.choose():
		return Way{learn: learnThreads}
	}
	return Way{Threads: 1, learn: learnThreads}
}

// Observe feeds the chooser that chose w.
func (a *Auto) Observe(w Way, d time.Duration) {
	switch w.learn {
	case learnSplit:
		a.split.observe(w.Split, d)
	case learnThreads:
		a.threads.observe(w.Threads == 0, d)
	}
}

// Observed returns how many runs each chooser observed: split[0] whole and
// split[1] split; threads[0] serial and threads[1] threaded.
func (a *Auto) Observed() (split, threads [2]int) {
	return a.split.observed(), a.threads.observed()
}

// Learned reports whether each chooser has decided.
func (a *Auto) Learned() (split, threads bool) {
	return a.split.learned(), a.threads.learned()
}

// coreShare is how many threads an execution's kernels may use on cores
// cores while others other executions run: its share, at least one; 0
// when that is every core (no limit).
func coreShare(cores, others int) int {
	share := max(cores/(others+1), 1)
	if share >= cores {
		return 0
	}
	return share
}
