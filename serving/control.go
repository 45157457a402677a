package serving

import (
	"errors"
	"fmt"
)

// ControlMode says who changes the loaded models, as Triton's
// --model-control-mode does.
type ControlMode string

// Model control modes.
const (
	// ControlPoll: the repository is polled (Options.PollInterval) and the
	// Manager follows it; Load and Unload are refused, so that the
	// repository alone says what is served.
	ControlPoll ControlMode = "poll"
	// ControlExplicit: every model loads at start, then only Load and
	// Unload change what is served (no polling); an unloaded model stays
	// unloaded, and its status says so.
	ControlExplicit ControlMode = "explicit"
	// ControlNone: the models load once at start; nothing changes them.
	ControlNone ControlMode = "none"
)

// ErrModelControl: Load or Unload in a model control mode that does not
// allow them (the api packages answer 400, as Triton does).
var ErrModelControl = errors.New("serving: model control")

// controlMode is the mode the options select: ControlMode, else poll with
// a PollInterval and explicit without (the Manager's behaviour before
// modes).
func (o *Options) controlMode() ControlMode {
	switch {
	case o.ControlMode != "":
		return o.ControlMode
	case o.PollInterval > 0:
		return ControlPoll
	}
	return ControlExplicit
}

// validateControl checks ControlMode against PollInterval.
func (o *Options) validateControl() error {
	switch mode := o.controlMode(); {
	case mode != ControlPoll && mode != ControlExplicit && mode != ControlNone:
		return fmt.Errorf("serving: Options.ControlMode is %q, want poll, explicit or none", mode)
	case mode == ControlPoll && o.PollInterval <= 0:
		return fmt.Errorf("serving: Options.ControlMode poll needs a PollInterval > 0, got %v", o.PollInterval)
	case mode != ControlPoll && o.PollInterval > 0:
		return fmt.Errorf("serving: Options.ControlMode %s does not poll the repository; PollInterval is %v, want 0", mode, o.PollInterval)
	}
	return nil
}

// allowControl refuses Load and Unload (what) outside explicit mode.
func (m *Manager) allowControl(what, model string) error {
	switch m.opts.controlMode() {
	case ControlPoll:
		return fmt.Errorf("%w: cannot %s model %q: the model control mode is poll, so the repository alone says what is served (change it, or run with --model-control-mode explicit)", ErrModelControl, what, model)
	case ControlNone:
		return fmt.Errorf("%w: cannot %s model %q: the model control mode is none, so the models loaded at start do not change", ErrModelControl, what, model)
	}
	return nil
}

// unloadedReason is the status reason of an unloaded version.
func (m *Manager) unloadedReason(name string) string {
	if m.opts.LoadPolicy == LoadLazy {
		return lazyLoadedReason
	}
	if m.opts.controlMode() == ControlExplicit {
		return fmt.Sprintf("unloaded (model control explicit: it stays unloaded until POST /v2/repository/models/%s/load)", name)
	}
	return "unloaded"
}
