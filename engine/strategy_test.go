package engine

import (
	"testing"
	"time"
)

// TestCoreShare: an execution beside others gets its share of the cores
// for its kernels' threads, at least one, and no limit when that is all.
func TestCoreShare(t *testing.T) {
	for _, tc := range []struct {
		cores  int
		others int
		want   int
	}{
		{2, 1, 1}, {2, 5, 1}, {1, 1, 0}, {16, 1, 8}, {16, 3, 4}, {16, 40, 1}, {3, 1, 1}, {4, 0, 0},
	} {
		if got := coreShare(tc.cores, tc.others); got != tc.want {
			t.Errorf("coreShare(%d cores, %d others) = %d, want %d", tc.cores, tc.others, got, tc.want)
		}
	}
}

// TestStrategies: what each split policy lets an execution do under a
// load. SplitOff and other platforms never split; SplitAlways splits
// whatever it can on the idle cores; SplitAuto splits only alone, asks its
// split chooser then (the first runs whole), gives an execution beside
// others its share of the cores for the kernels' threads, and asks its
// threads chooser when alone (the first runs serial).
func TestStrategies(t *testing.T) {
	alone, busy := Load{Others: 0, Cores: 4}, Load{Others: 1, Cores: 4}
	cpu := &Engine{cpu: true, kernels: true}
	for _, tc := range []struct {
		name          string
		s             Strategy
		partsAlone    int
		partsBusy     int
		split, whole  Way // Choose(alone, true), Choose(alone, false)
		wholeBusy     Way // Choose(busy, false)
		observeLearns bool
	}{
		{"off", cpu.NewStrategy(SplitOff), 0, 0, Way{}, Way{}, Way{}, false},
		{"not cpu", (&Engine{}).NewStrategy(SplitAuto), 0, 0, Way{}, Way{}, Way{}, false},
		{"always", cpu.NewStrategy(SplitAlways), 4, 3, Way{Split: true}, Way{}, Way{}, false},
		{"auto", cpu.NewStrategy(SplitAuto), 4, 0, Way{learn: learnSplit}, Way{Threads: 1, learn: learnThreads}, Way{Threads: 2}, true},
		{"auto without kernels", (&Engine{cpu: true}).NewStrategy(SplitAuto), 4, 0, Way{learn: learnSplit}, Way{}, Way{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			if got := s.Parts(alone); got != tc.partsAlone {
				t.Errorf("Parts(alone) = %d, want %d", got, tc.partsAlone)
			}
			if got := s.Parts(busy); got != tc.partsBusy {
				t.Errorf("Parts(busy) = %d, want %d", got, tc.partsBusy)
			}
			if got := s.Choose(busy, false); got != tc.wholeBusy {
				t.Errorf("Choose(busy, whole) = %+v, want %+v", got, tc.wholeBusy)
			}
			split := s.Choose(alone, true)
			if split != tc.split {
				t.Errorf("Choose(alone, split) = %+v, want %+v", split, tc.split)
			}
			if got := s.Choose(alone, false); got != tc.whole {
				t.Errorf("Choose(alone, whole) = %+v, want %+v", got, tc.whole)
			}
			s.Observe(split, time.Millisecond)
			if a, ok := s.(*Auto); ok {
				seen, _ := a.Observed()
				if learned := seen[0]+seen[1] == 1; learned != tc.observeLearns {
					t.Errorf("split chooser observed %v after one run, want a run counted: %v", seen, tc.observeLearns)
				}
			}
		})
	}
}
