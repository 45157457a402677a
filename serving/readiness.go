package serving

import (
	"fmt"
	"strconv"
)

// Readiness is whether the server takes requests and, when it does not,
// why. The Manager computes it (Manager.Readiness) and every protocol
// reports it as it is: HTTP /v2/health/ready, gRPC ServerReady and the NATS
// health subject never disagree.
type Readiness struct {
	Ready bool
	// Reason says why the server is not ready; "" when it is.
	Reason string
}

// readiness is the Manager's state that readiness depends on besides its
// models. Guarded by Manager.mu.
type readiness struct {
	draining bool
	checks   []func() error
}

// Drain marks the server as shutting down: from now on it is not ready
// (load balancers stop sending it requests) while it still serves those
// that come. Shutdown drains too.
func (m *Manager) Drain() {
	m.mu.Lock()
	m.ready.draining = true
	m.mu.Unlock()
}

// AddReadinessCheck adds a condition of readiness: while check returns an
// error, the server is not ready and the error says why (the NATS durable
// consumer, gone and being re-created). check must be quick and safe for
// concurrent use.
func (m *Manager) AddReadinessCheck(check func() error) {
	m.mu.Lock()
	m.ready.checks = append(m.ready.checks, check)
	m.mu.Unlock()
}

// Readiness says whether the server takes requests: it is not draining or
// shut down, the initial scan and load are done, no model version is
// LOADING, every readiness check holds and, unless
// Options.RelaxedReadiness, every model version that should load is READY
// (a model that failed to load keeps the server unready until it is fixed
// or removed; a version unloaded on purpose, or being unloaded after an
// upgrade, does not count). A model that loads on demand (LoadLazy) does not
// count either: its loads and evictions follow requests.
func (m *Manager) Readiness() Readiness {
	m.mu.Lock()
	closed, scanned, draining := m.closed, m.scanned, m.ready.draining
	checks := m.ready.checks
	lazy := m.lazyModelsLocked()
	m.mu.Unlock()
	switch {
	case closed || draining:
		return Readiness{Reason: "the server is shutting down"}
	case !scanned:
		return Readiness{Reason: "models are still loading"}
	}
	for _, st := range m.Status() {
		if lazy[st.Name] {
			continue
		}
		what := "model " + strconv.Quote(st.Name)
		if st.Version > 0 {
			what += " version " + strconv.FormatInt(st.Version, 10)
		}
		switch {
		case st.State == StateLoading:
			return Readiness{Reason: what + " is still loading"}
		case m.opts.RelaxedReadiness, st.State == StateReady, st.State == StateUnloading, st.Unloaded:
		default:
			return Readiness{Reason: fmt.Sprintf("%s is %s: %s", what, st.State, st.Reason)}
		}
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return Readiness{Reason: err.Error()}
		}
	}
	return Readiness{Ready: true}
}

// Ready reports Readiness().Ready.
func (m *Manager) Ready() bool { return m.Readiness().Ready }

// lazyModelsLocked is the set of the models that load on demand. m.mu is
// held.
func (m *Manager) lazyModelsLocked() map[string]bool {
	lazy := map[string]bool{}
	for name, md := range m.models {
		if md.lazy != nil {
			lazy[name] = true
		}
	}
	return lazy
}
