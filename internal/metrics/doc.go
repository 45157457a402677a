// Package metrics is a small registry of Prometheus metrics written in the
// text exposition format, version 0.0.4, built on prometheus/client_golang
// (a prometheus.Registry underneath: Prometheus returns it, for exporters
// and handlers that want a Gatherer; RegisterRuntime adds client_golang's Go
// runtime and process collectors).
//
// A Registry holds metric families, each a vector of series distinguished by
// label values:
//
//	r := metrics.NewRegistry()
//	reqs := r.NewCounterVec("xserve_requests_total", "Inference requests.", "model", "outcome")
//	lat := r.NewHistogramVec("xserve_request_duration_seconds", "Request latency.",
//		[]float64{0.001, 0.01, 0.1, 1}, "model")
//	reqs.With("resnet", "success").Inc()
//	lat.With("resnet").Observe(0.004)
//	err := r.Write(w) // what a /metrics handler serves
//
// Write emits the families sorted by name, each with its HELP and TYPE lines
// (also when it has no series yet), and its series sorted by label values.
// Within a series the labels appear sorted by name (a histogram's le last);
// label values are escaped (backslash, double quote, newline) and HELP text
// too (backslash, newline). Histograms have fixed upper bounds and write
// cumulative _bucket series (le ending with "+Inf"), then _sum and _count.
//
// Registering two families with one name, an invalid metric or label name,
// or calling With with the wrong number of label values are programming
// errors and panic; nothing here depends on user input.
//
// All types are safe for concurrent use, as client_golang's are.
// Registry.mu guards only the list of registered families.
package metrics
