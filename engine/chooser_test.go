package engine

import (
	"testing"
	"time"
)

// chooserRun feeds c n runs whose times cost gives (by way and run index),
// a run right after a run of the other way taking 50 times as long (which
// the chooser must not count), and returns how many took the alternative
// way.
func chooserRun(c *chooser, n int, cost func(alt bool, i int) time.Duration) (alts int) {
	last := -1
	for i := range n {
		alt := c.choose()
		d := cost(alt, i)
		if last >= 0 && last != wayOf(alt) {
			d *= 50
		}
		last = wayOf(alt)
		if alt {
			alts++
		}
		c.observe(alt, d)
	}
	return alts
}

// fixed returns a cost of base for the base way and alt for the other.
func fixed(base, alt time.Duration) func(bool, int) time.Duration {
	return func(a bool, _ int) time.Duration {
		if a {
			return alt
		}
		return base
	}
}

const us = time.Microsecond

// TestWayChooserLearns: the first runs go base, then alternative, then
// one episode decides: the alternative unless the base way is
// wayBaseMargin faster; then only the chosen way runs, but for one
// episode after wayExplore runs, then twice as many, and so on.
func TestWayChooserLearns(t *testing.T) {
	for _, tc := range []struct {
		name      string
		base, alt time.Duration
		wantAlt   bool
	}{
		{"alternative faster", 1000 * us, 600 * us, true},
		{"base faster", 800 * us, 950 * us, false},
		{"base a little faster: alternative, within the margin", 800 * us, 850 * us, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c chooser
			var got []bool
			for range 2*waySkip + wayEpisode {
				alt := c.choose()
				got = append(got, alt)
				c.observe(alt, fixed(tc.base, tc.alt)(alt, 0)*50) // the first runs, slow, must not count
				if len(got) > 2*waySkip {
					break
				}
			}
			for i, alt := range got[:2*waySkip] {
				if want := i >= waySkip; alt != want {
					t.Fatalf("first run %d: alternative=%v, want %v", i, alt, want)
				}
			}
			c = chooser{}
			chooserRun(&c, 2*waySkip+wayEpisode, fixed(tc.base, tc.alt))
			if !c.learned() || c.altChosen() != tc.wantAlt {
				t.Fatalf("after one episode: learned=%v alternative=%v, want true, %v", c.learned(), c.altChosen(), tc.wantAlt)
			}
			// Episodes after 128, then 256, then 512 runs (32, 64, 128
			// where the base way is chosen): each one that keeps the way
			// doubles the interval.
			explore := wayExplore
			if !tc.wantAlt {
				explore = wayBaseExplore
			}
			runs := 7*explore + 3*wayEpisode
			alts := chooserRun(&c, runs, fixed(tc.base, tc.alt))
			other := alts
			if tc.wantAlt {
				other = runs - alts
			}
			if want := 3 * wayEpisode / 2; other != want {
				t.Errorf("%d of %d runs took the slower way, want %d (three episodes)", other, runs, want)
			}
			if c.streak != 3 {
				t.Errorf("after three episodes that kept the way: streak %d, want 3", c.streak)
			}
			if c.altChosen() != tc.wantAlt {
				t.Errorf("after exploring: alternative=%v, want %v", c.altChosen(), tc.wantAlt)
			}
		})
	}
}

// TestWayChooserFollowsTheMachine: when the machine changes and the chosen
// way's runs move, an episode follows within wayDriftMin runs and the
// other way is taken where it is now the faster.
func TestWayChooserFollowsTheMachine(t *testing.T) {
	var c chooser
	chooserRun(&c, 2*waySkip+wayEpisode, fixed(1000*us, 600*us))
	if !c.altChosen() {
		t.Fatal("alternative measured faster but not chosen")
	}
	// A slow phase: the alternative (both cores) takes 3x, the base way
	// 1.3x.
	chooserRun(&c, wayDriftMin+wayWindow+wayEpisode, fixed(1300*us, 1800*us))
	if c.altChosen() {
		t.Fatal("alternative 1.5x slower for a phase but still chosen")
	}
	// The phase ends: the base way's runs drop back; the alternative must
	// be back before the next scheduled exploration.
	chooserRun(&c, wayDriftMin+wayWindow+wayEpisode, fixed(1000*us, 600*us))
	if !c.altChosen() {
		t.Error("the machine went quiet but the alternative, faster again, was not taken back")
	}

	// A burst that slows the alternative only while the first episode runs:
	// the next scheduled one, wayBaseExplore runs later, wins it back.
	var b chooser
	chooserRun(&b, 2*waySkip+wayEpisode, fixed(1000*us, 3000*us))
	if b.altChosen() {
		t.Fatal("alternative measured slower in the episode but chosen")
	}
	chooserRun(&b, wayBaseExplore+wayEpisode, fixed(1000*us, 600*us))
	if !b.altChosen() {
		t.Errorf("after %d runs the faster alternative was not chosen back", wayBaseExplore+wayEpisode)
	}
}

// TestWayChooserMissingRuns: runs chosen but never observed (they failed)
// do not leave an episode waiting for ever.
func TestWayChooserMissingRuns(t *testing.T) {
	var c chooser
	chooserRun(&c, 2*waySkip, fixed(1000*us, 600*us))
	for i := range 4 * wayEpisode {
		if alt := c.choose(); alt && i < 3*wayEpisode {
			continue // the alternative's runs fail
		} else {
			c.observe(alt, fixed(1000*us, 600*us)(alt, 0))
		}
	}
	if !c.learned() {
		t.Error("an episode whose alternative runs failed for a while never ended")
	}
}
