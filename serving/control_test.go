package serving

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestModelControlModes: poll and none refuse Load and Unload; explicit
// takes them, and an unloaded model stays unloaded (the repository is not
// polled) and says so.
func TestModelControlModes(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []ControlMode{ControlPoll, ControlNone} {
		t.Run(string(mode), func(t *testing.T) {
			r := newRepo(t)
			r.add("tinycnn", 1, tinyCNN)
			m, _ := start(t, r, func(o *Options) {
				o.ControlMode = mode
				if mode == ControlPoll {
					o.PollInterval = 20 * time.Millisecond
				}
			})
			for what, err := range map[string]error{"unload": m.Unload(ctx, "tinycnn"), "load": m.Load(ctx, "tinycnn")} {
				if !errors.Is(err, ErrModelControl) || !strings.Contains(err.Error(), "model control mode is "+string(mode)) {
					t.Errorf("%s: %v, want ErrModelControl", what, err)
				}
			}
			if !m.ModelReady("tinycnn", 1) {
				t.Error("tinycnn not ready")
			}
		})
	}
	t.Run("explicit", func(t *testing.T) {
		r := newRepo(t)
		r.add("tinycnn", 1, tinyCNN)
		m, _ := start(t, r, func(o *Options) { o.ControlMode = ControlExplicit })
		if !m.ModelReady("tinycnn", 1) {
			t.Fatal("explicit mode: tinycnn not loaded at start")
		}
		if err := m.Unload(ctx, "tinycnn"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // no poller brings it back
		if s, reason := state(m, "tinycnn", 1); s != StateUnavailable || !strings.Contains(reason, "stays unloaded until POST /v2/repository/models/tinycnn/load") {
			t.Errorf("after Unload: %s %q", s, reason)
		}
		if err := m.Load(ctx, "tinycnn"); err != nil || !m.ModelReady("tinycnn", 1) {
			t.Errorf("Load: %v", err)
		}
	})
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{ControlMode: "sometimes"}, `ControlMode is "sometimes"`},
		{Options{ControlMode: ControlPoll}, "poll needs a PollInterval > 0"},
		{Options{ControlMode: ControlExplicit, PollInterval: time.Second}, "explicit does not poll"},
	} {
		if err := tc.opts.validateControl(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("validateControl(%+v) = %v, want %q", tc.opts, err, tc.want)
		}
	}
}
