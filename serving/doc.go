// Package serving serves the models of a repository: it loads each model
// version, keeps its weights resident on the device (uploaded once and
// shared by every shape bucket's executable), compiles one executable per
// shape bucket, and runs inference requests on them.
//
// The low-level pieces are Weights, Compile and Executable.Run: a lowered
// program compiled on a PJRT client and run on host tensors. Manager builds
// on them:
//
//	m, err := serving.NewManager(ctx, serving.Options{Client: client, Repository: repo})
//	resp, err := m.Infer(ctx, "resnet18", 0, &serving.InferRequest{Inputs: inputs})
//	err = m.Shutdown(ctx)
//
// # Signatures and buckets
//
// A version's signature is the model file's inputs and outputs merged with
// config.yaml: config dims may give the model's symbolic dims other symbol
// names or pin them to a size, and dtypes may be restated; anything that
// disagrees with the model (rank, a static dim, a dtype) is a load error
// naming the config key and the model's value. Every symbol of the inputs
// gets its bucket sizes from config.yaml's buckets, else [1 2 4 8 16 32
// 64] (logged once per load). A request's size for each symbol comes from its
// inputs (all inputs must agree) and it runs in the bucket combination made
// of the smallest bucket >= that size per symbol; a size above the largest
// bucket is ErrNoBucket, never compiled.
//
// Each input is padded up to the bucket's shape with the input's pad value
// (config pad_value, default 0) by block copies of the request's bytes into
// a tensor of the bucket's shape (no copy at all when the request fits the
// bucket exactly). Each output dim that follows an input symbol (the model
// says so, or config.yaml's outputs do) is sliced back to the request's
// size. An output dim the server cannot relate to an input symbol (unknown,
// "?", in the model's signature and not named in config.yaml) is returned at
// its executed size, which includes the padding when the request was padded:
// name the dim's symbol under outputs in config.yaml to have it sliced.
//
// # Compilation
//
// Each (version, bucket) is compiled once: at load with warmup eager (one
// progress log line per bucket), else by the first request that needs it,
// which concurrent requests for the same bucket wait for (a failed compile
// fails every waiter and the next request tries again). With
// Options.CompileCacheDir the lowered StableHLO is kept on disk keyed by the
// model's content, the bucket, the lowering options and the server build, so
// a restart skips lowering; compiled executables are kept too, keyed by the
// plugin and the program, when the PJRT binding can serialize them (where it
// cannot, that is logged once at debug level). Entries are written to a
// temporary file and renamed into place.
//
// # Lifecycle
//
// A version is LOADING, READY, UNLOADING or UNAVAILABLE (with a reason: the
// load error, or "unloaded"). Only READY versions take requests. Unloading
// (Unload, a version leaving the repository, Shutdown) turns a version
// UNLOADING at once and frees its executables and weights once its in-flight
// requests finished. A version whose model file or config changed is
// reloaded beside the serving instance, which keeps serving until the new one
// is READY (and keeps serving if the reload fails). A model or version that
// fails to load is UNAVAILABLE and never affects the others. With
// Options.PollInterval the repository is polled for added, removed and
// changed models and versions.
//
// InferRequest.Priority is not used yet: requests run one at a time in their
// bucket. Execution of a bucket (version.runBucket) is kept apart from
// request validation so that a batcher can run several validated requests in
// one bucket, stacked along the "batch" symbol.
//
// # Metrics
//
// WriteMetrics writes, in the Prometheus text format: xserve_requests_total
// {model,version,outcome}, xserve_request_duration_seconds
// {model,version,phase=queue|compute|total}, xserve_compilations_total
// {model,version,bucket}, xserve_compile_seconds {model,version},
// xserve_compile_cache_total {kind=stablehlo|executable,result=hit|miss},
// xserve_models_loaded (READY versions) and xserve_model_state
// {model,version,state} (1 for the current state, 0 for the others).
// Requests naming an unknown model are not counted (their labels would come
// from clients).
//
// # Concurrency
//
// Every method of Manager is safe for concurrent use. Lock order: a model's
// op mutex (which serializes its loads and unloads), then Manager.mu, then a
// bucket's mu. No lock is held while importing, lowering, compiling,
// executing or waiting for requests.
package serving
