// Package serving serves the models of a repository: it loads each model
// version, keeps its weights resident on the device (uploaded once and
// shared by every shape bucket's executable), compiles one executable per
// shape bucket, and runs inference requests on them: validate, bucket,
// pad, execute, slice.
//
// Compiling and running are package engine's (engine.Model.Build, one
// execute path, the compile cache): serving says which sizes to build and
// which rows to run. Manager is the entry point:
//
//	m, err := serving.NewManager(ctx, serving.Options{Client: client, Repository: repo})
//	resp, err := m.Infer(ctx, "resnet18", 0, &serving.InferRequest{Inputs: inputs})
//	err = m.Shutdown(ctx)
//
// # Bucket plan
//
// One type owns a version's shapes: BucketPlan (bucketplan.go), built by
// NewBucketPlan from the model file's signature merged with config.yaml
// (config dims may rename the model's symbols or pin them to a size; dtypes,
// ranks and static dims must agree, else a load error naming the key). It
// knows every served symbol and where it appears, which one is the batch
// (config.yaml's batch_symbol, else the leading dim of every input, served
// as "batch"), each symbol's buckets (config.yaml's, else [1 2 4 ... 64]
// for the batch and the range's minimum then powers of two up to 4096 for
// the others, both clamped to the model's range, less the sizes at which
// the model's shapes fail) and pad policy, and each input's pad value.
// For a request it chooses the sizes to execute at (the smallest bucket
// that holds each padded symbol, the request's own size for a symbol served
// exactly or above the largest default bucket, compiled on first use within
// a server-wide compile budget; above config.yaml's largest bucket or
// outside the model's range is ErrNoBucket), pads the inputs into
// them (block copies of the request's bytes, none when the request fits
// exactly) and slices every output back to its exact shape at the request's
// sizes, which the IR's shape propagation gives (lower.OutputShapes,
// remembered per distinct shape), whatever the model file declares.
//
// A symbol's pad policy is config.yaml's pad, else the load-time probe's
// (probe.go): the model runs on pseudo-random inputs at a typical size
// exactly and padded by at least half of it into a bucket (a one-row
// padding can hide behind a strided convolution's own zero padding), and
// the symbol is padded only when every output's valid region is
// unchanged; otherwise each distinct size gets an
// executable of its own, compiled on first use and kept in a bounded LRU
// (exact_executables). docs/BUCKETS.md has the details.
//
// On a CPU, an execution of several rows of a model whose requests stack
// may run as shards instead, one per idle core, each in the smallest
// compiled batch bucket that holds its rows, their outputs stacked back
// before anything reads them (rowsplit.go): when the bucket's
// engine.Strategy says so (Options.SplitBatches; in SplitAuto, when no other
// execution runs and the bucket's own timings say splitting is faster).
//
// # Compilation
//
// Each (version, bucket) is compiled once: at load with warmup eager (one
// progress log line per bucket, before the probe, which then reuses them),
// else by the first request that needs it (the probe's buckets at load),
// which concurrent requests for the same bucket wait for (a failed compile
// fails every waiter and the next request tries again). With
// Options.CompileCacheDir, engine's compile cache keeps the lowered
// StableHLO and the compiled executables across restarts (see package
// engine); what it answered is counted in xserve_compile_cache_total, an
// entry found damaged as result="corrupt" (it is deleted, logged and
// rebuilt, so a damaged cache never keeps a model from loading).
//
// # Lifecycle
//
// A version is LOADING, READY, UNLOADING or UNAVAILABLE (with a reason: the
// load error, or "unloaded"). Only READY versions take requests. Unloading
// (Unload, a version leaving the repository, Shutdown) turns a version
// UNLOADING at once and frees its executables and weights once its in-flight
// requests finished. A version whose model file or config changed is
// reloaded beside the serving instance, which keeps serving until the new one
// is READY (and keeps serving if the reload fails). A failed reload stays
// visible, as Triton users expect of a model whose file no longer loads: the
// version is still READY (it serves the instance loaded before) with a
// reason that starts "reload failed", xserve_model_stale is 1 and
// xserve_model_reload_failures_total counts it; the same broken file and
// config are not retried on every poll, only once either changes again (or
// the old file comes back, which clears the reason). A model or version that
// fails to load is UNAVAILABLE and never affects the others. With
// Options.PollInterval the repository is polled for added, removed and
// changed models and versions.
//
// Options.ControlMode says who changes the models, as Triton's
// --model-control-mode: ControlPoll (the poller; Load and Unload are
// ErrModelControl), ControlExplicit (every model loads at start, then only
// Load and Unload; an unloaded model stays unloaded and its reason says so)
// or ControlNone (load once). CheckInput checks an input's declared dtype
// and shape against a version before a protocol decodes its data.
//
// # Dynamic batching
//
// A version batches when its config.yaml has batching enabled (the default),
// its batch symbol is padded, and every output has exactly one dim that
// grows with the batch (found from the IR's shapes at two batch sizes);
// otherwise (the load log says why) each request runs alone in its bucket,
// concurrently with the others. A batching version has a batching.Batcher with one queue per
// non-batch bucket, keyed "model/version/sym=size,..." (e.g. "pair/1/seq=8",
// or "tinycnn/1" when batch is the only symbol), so requests of different
// non-batch buckets never share a batch. Its settings come from config.yaml:
// max_batch_size (default the largest batch bucket; with no batch buckets in
// config.yaml, the largest default bucket), the batch buckets, max_queue_delay
// (0 dispatches at once), max_queue_size (per queue), timeout (the deadline of
// a request whose context has none; it bounds the whole request) and
// priority_levels (InferRequest.Priority, 0 the highest; it has no effect on a
// version that does not batch).
//
// A batch runs once in the batch bucket of its padded rows (the smallest
// batch bucket >= its rows): its input tensors are allocated at that bucket's
// shape and each request's tensor is copied straight into its rows (the
// batcher's Item.Offset), padding everything else with the pad value; after
// the one execution, each request's rows of every output are copied straight
// into its response tensors. No per-request padded tensor is ever made.
//
// The dispatch policy is adaptive (batching.Options.IdleDispatch): a request
// that finds no batch of its queue executing is dispatched at once, so a lone
// request never waits for company and batching costs nothing at low load.
// While a batch executes, the requests that arrive form the next batch; up to
// two batches of a queue execute at once, a second one starting when it is
// full or its oldest request has waited max_queue_delay. So no request waits
// for company longer than max_queue_delay plus one execution, and batches
// grow with the load.
//
// "Full" is learned: max_batch_size is an upper bound, and each queue
// measures every batch bucket's execution time per padded row as batches run
// and limits its batches to the largest bucket that costs within 10% of the
// cheapest one measured, trying the next bucket up when it has no
// measurement yet and every 50 batches after (xserve_batch_size_limit shows
// the limit). On XLA CPU a small model's per-row cost halves from batch 1 to
// 32, while a 112x112 CNN costs more per row at batch 64 than at 8, where
// filling the largest bucket would lose throughput. docs/BENCHMARKS.md
// ("Dynamic batching") has the measurements behind these choices.
//
// Requests whose deadline passes or whose caller goes away while queued leave
// the queue and never run (Infer returns the context's error; for a deadline
// it also wraps batching.ErrExpired). A full queue answers at once with
// ErrOverloaded wrapping the batcher's *batching.QueueFullError, whose
// RetryAfter estimates when to try again (HTTP 429 with Retry-After). A
// request with more rows than max_batch_size is ErrInvalidInput. Shutdown
// drains the queues: it refuses new requests, dispatches the queued ones at
// once and waits for them; if its context ends first, the requests still
// queued fail with ErrClosed.
//
// Results do not depend on batching for elementwise and reduction models
// (bit-identical); XLA CPU tiles convolutions and matmuls by the batch size,
// so a row run in a larger bucket may differ from an unbatched run in the
// last bits (the tests allow 1e-6 on tinycnn's probabilities, and require
// bit-identical results within one bucket).
//
// # Sequences
//
// A model whose output feeds one of its inputs (silero-vad's stateN into
// state; found by findStates, or named in config.yaml's sequence:) is
// stateful: a request with InferRequest.Sequence is a step of that
// sequence, without the state inputs. The version's sequenceTable keeps
// each sequence's state on the device between its steps
// (sequences.go); steps of different sequences run in one execution, their
// states joined and split on the device (engine.Concat, engine.Split;
// seqbatch.go). Sequences idle past Options.MaxSequenceIdle expire;
// Options.MaxSequences bounds them; a step of a sequence that is not active
// is ErrSequence, saying why. docs/SEQUENCES.md has the details.
//
// # Metrics
//
// WriteMetrics writes, in the Prometheus text format: xserve_requests_total
// {model,version,outcome}, xserve_request_duration_seconds
// {model,version,phase=queue|compute|total} (queue: the time in the
// batching queue until dispatch, plus any wait for a compile; compute: the
// execution of the request's bucket or batch), xserve_batch_rows
// {model,version,kind=real|padded} (one observation per batch: the requests'
// rows and the batch bucket it ran in), xserve_queue_rejected_total
// {model,version,reason} (requests that left the batching queue without
// running: queue_full, expired, cancelled, closed, too_large, invalid),
// xserve_batch_size_limit {model,version,queue} (the learned batch size
// limit of each queue), xserve_compilations_total
// {model,version,bucket}, xserve_compile_seconds {model,version},
// xserve_compile_cache_total {kind=stablehlo|executable,result=hit|miss|corrupt},
// xserve_exact_executables {model,version} (exact-size executables held),
// xserve_exact_evictions_total {model,version}, xserve_models_loaded (READY
// versions) and xserve_model_state {model,version,state} (1 for the current
// state, 0 for the others), xserve_model_reload_failures_total
// {model,version} and xserve_model_stale {model,version}.
// Requests naming an unknown model are not counted (their labels would come
// from clients).
//
// # Concurrency
//
// Every method of Manager is safe for concurrent use. Lock order: a model's
// op mutex (which serializes its loads and unloads), then Manager.mu, then a
// version's bmu (its buckets and queue sizers), then a bucket's mu; the batcher's locks are never held together with these. No
// lock is held while importing, lowering, compiling, executing or waiting for
// requests. A version's executables and weights are freed only after its
// batcher has shut down, so a batch whose callers went away still runs on
// live executables.
package serving
