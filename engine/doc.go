// Package engine compiles models' programs on a PJRT client and runs them:
// the one assembled path from a model file to outputs that the server
// (package serving), `xserve run` (package runner), the zoo check and the
// conformance harness share. It knows nothing of buckets, requests or
// protocols: its callers say which symbol sizes to build and which inputs
// to run.
//
//	e, err := engine.New(engine.Options{Client: client, CacheDir: dir})
//	m, err := e.Load("model.onnx", engine.LoadOptions{}) // import, optimize once
//	x, build, err := m.Build(ctx, map[string]int64{"batch": 4})
//	outs, err := x.Run(ctx, inputs) // host tensors in, host tensors out
//	outs, err = x.Trim(outs)        // bounded outputs to their valid size
//	x.Close(); m.Close()
//
// # Models and executables
//
// A Model is an imported graph, optimized once by the shape-independent
// passes, with its weights on the device: uploaded on first use and shared
// by every executable built for it (a weight is keyed by name and content,
// so a constant that folding made differently for two sizes gets a buffer
// of its own). Model.Build lowers the graph for the given symbol sizes and
// compiles the program; an Executable is that program bound to the
// weights. Close executables before their model; closing the model frees
// the weights and drops the graph (Graph returns nil, the other methods
// ErrClosed).
//
// # Compile cache
//
// With Options.CacheDir (or a Cache of its own), Build keeps the lowered
// StableHLO of a model loaded from a file keyed by the content of the
// file's directory, the symbol sizes, the lowering options and the server
// build, so that a restart skips lowering; and compiled executables keyed
// by the plugin, its target and the program, where the plugin can serialize
// them. Entries are written whole (a temporary file renamed into place),
// each with a SHA-256 of its payload. An entry whose checksum fails, an
// executable that does not deserialize and cached StableHLO that does not
// compile are deleted, logged as warnings and rebuilt; Build returns what
// the cache answered (Build.Cache) for the caller's metrics.
//
// # Executing
//
// There is one execute path: a Job (an executable and its host inputs) or
// several run at once go through one pjrt.Client.RunHostAll, the first on
// the calling thread and the others on the client's worker threads (a lone
// Job on every thread its kernels want is that call's RunHost); each Job's
// Outs come back as host tensors, the program's guard results checked (a
// guard that fired is an error, never a stand-in's result).
// Executable.Run is that path for one Job.
//
// How an execution runs on a CPU is a Strategy's choice, made per
// execution from the Load it begins under (Engine.Begin counts the
// executions running, Execution.End stops counting one): whole on every
// thread its CPU kernels want, whole on fewer threads (its share of the
// cores while others run), or split into parts run at once, one per idle
// core, whose rows the caller cuts and stacks (serving splits a batch's
// rows across its smaller buckets). Engine.NewStrategy returns one for a
// SplitPolicy; SplitAuto's (Auto) learns which way is faster from the
// times the caller measures of the executions it chose (Observe).
//
// # Device-resident values
//
// Executable.Execute runs on pjrt.Buffers (Engine.Upload makes them) and
// returns its outputs on the device, so a value stays there between
// executions (a generation loop's KV cache between decode steps, a
// sequence's state between requests) with no host copy per step
// (pjrt.Client.Transfers counts them). ExecuteOptions.Donate gives input
// buffers to the execution: a donated buffer is invalid afterwards, and
// where the program aliases it to an output (its parameter's
// tf.aliasing_output attribute), the output reuses its memory instead of a
// new allocation: the value is updated in place.
//
// # Concurrency
//
// Every method of Engine, Model and Executable is safe for concurrent use;
// an executable runs from many goroutines at once with the same weights.
package engine
