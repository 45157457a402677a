package engine

import "testing"

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
