package serving

import (
	"github.com/xserve/xserve/batching"
	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/internal/metrics"
)

// Request outcomes and phases, as in the outcome and phase labels.
const (
	outcomeSuccess = "success"
	outcomeFailure = "failure"
	phaseQueue     = "queue"
	phaseCompute   = "compute"
	phaseTotal     = "total"
	rowsReal       = "real"
	rowsPadded     = "padded"
)

var (
	requestBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	compileBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	rowBuckets     = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}
	tokenBuckets   = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	// queueReasons are the reasons of xserve_queue_rejected_total shown
	// (at 0) from the moment a version batches.
	queueReasons = []string{batching.ReasonQueueFull, batching.ReasonExpired, batching.ReasonCancelled}
	allStates    = []ModelState{StateLoading, StateReady, StateUnloading, StateUnavailable}
)

// serverMetrics are the metrics a Manager keeps (see WriteMetrics).
type serverMetrics struct {
	reg            *metrics.Registry
	requests       *metrics.CounterVec   // model, version, outcome
	duration       *metrics.HistogramVec // model, version, phase
	compilations   *metrics.CounterVec   // model, version, bucket
	compileSeconds *metrics.HistogramVec // model, version
	bucketCompile  *metrics.GaugeVec     // model, version, bucket
	cache          *metrics.CounterVec   // kind, result
	loaded         *metrics.GaugeVec
	state          *metrics.GaugeVec     // model, version, state
	reloadFailures *metrics.CounterVec   // model, version
	stale          *metrics.GaugeVec     // model, version
	batchRows      *metrics.HistogramVec // model, version, kind (real, padded)
	queueRejected  *metrics.CounterVec   // model, version, reason
	batchLimit     *metrics.GaugeVec     // model, version, queue
	exactExes      *metrics.GaugeVec     // model, version
	exactEvicted   *metrics.CounterVec   // model, version
	splitRuns      *metrics.CounterVec   // model, version
	queueDepth     *metrics.GaugeVec     // model, version; set at each scrape
	genSlots       *metrics.GaugeVec     // model, version; set at each scrape
	genWaiting     *metrics.GaugeVec     // model, version; set at each scrape
	genTokens      *metrics.GaugeVec     // model, version; set at each scrape
	genSteps       *metrics.GaugeVec     // model, version, kind; set at each scrape
	genEnded       *metrics.GaugeVec     // model, version, reason; set at each scrape
	genCache       *metrics.GaugeVec     // model, version; set at each scrape
	genTTFT        *metrics.HistogramVec // model, version
	genInterToken  *metrics.HistogramVec // model, version
	loads          *metrics.CounterVec   // model (LoadLazy)
	evictions      *metrics.CounterVec   // model (LoadLazy)
	loadWait       *metrics.HistogramVec // model (LoadLazy)
	loadWaiting    *metrics.GaugeVec     // (LoadLazy)
	memory         *metrics.GaugeVec     // model; set at each scrape
	memoryUsed     *metrics.GaugeVec     // device; set at each scrape
	memoryBudget   *metrics.GaugeVec     // device
	// deviceMemory and deviceExecutions are per device of the client.
	deviceMemory     *metrics.GaugeVec   // device; set at each scrape
	deviceExecutions *metrics.CounterVec // device
	// deviceLoad is the executions in flight and busy time per device.
	deviceLoad *deviceLoad
	// pipelineExecutions is the executions a request of a pipeline makes.
	pipelineExecutions *metrics.GaugeVec // model, version
	// pipelineHandoffs counts intermediates passed between two segments
	// of a pipeline that run on the device, by the path they took.
	pipelineHandoffs *metrics.CounterVec // model, version, path
}

func newServerMetrics() *serverMetrics {
	r := metrics.NewRegistry()
	m := &serverMetrics{
		reg: r,
		requests: r.NewCounterVec("xserve_requests_total",
			"Inference requests that reached a model version, by outcome.", "model", "version", "outcome"),
		duration: r.NewHistogramVec("xserve_request_duration_seconds",
			"Inference request latency: queue (waiting in the batching queue until the batch was dispatched, plus waiting for a compile), compute (upload, execute, download of the request's execution or batch) and total.",
			requestBuckets, "model", "version", "phase"),
		batchRows: r.NewHistogramVec("xserve_batch_rows",
			"Rows of each dispatched batch: real (the requests' rows) and padded (the batch bucket it ran in).",
			rowBuckets, "model", "version", "kind"),
		queueRejected: r.NewCounterVec("xserve_queue_rejected_total",
			"Requests that left the batching queue without executing, by reason: queue_full (refused at once, HTTP 429), expired (deadline passed while queued), cancelled (the client went away while queued), closed (shutdown), too_large, invalid.",
			"model", "version", "reason"),
		batchLimit: r.NewGaugeVec("xserve_batch_size_limit",
			"The most rows a queue's next batch may hold: max_batch_size, lowered to the batch bucket with the cheapest execution per row measured.",
			"model", "version", "queue"),
		queueDepth: r.NewGaugeVec("xserve_queue_depth",
			"Requests waiting in a READY version's batching queues now (read at each scrape).", "model", "version"),
		genSlots: r.NewGaugeVec("xserve_generate_slots_in_use",
			"Cache slots of a READY generative version holding a sequence now.", "model", "version"),
		genWaiting: r.NewGaugeVec("xserve_generate_waiting",
			"Generation requests of a READY generative version waiting for a slot now.", "model", "version"),
		genTokens: r.NewGaugeVec("xserve_generate_tokens",
			"Tokens a READY generative version generated since it loaded.", "model", "version"),
		genSteps: r.NewGaugeVec("xserve_generate_steps",
			"Steps a READY generative version ran since it loaded, by kind: prefill (one prompt) and decode (one token of every sequence in a slot).", "model", "version", "kind"),
		genEnded: r.NewGaugeVec("xserve_generate_sequences",
			"Sequences a READY generative version ended since it loaded, by reason: stop (eos, stop token or string), length (max_tokens or a full slot), cancelled (the client went away), deadline, error.", "model", "version", "reason"),
		genCache: r.NewGaugeVec("xserve_generate_cache_occupancy",
			"Fraction of a READY generative version's cache entries (slots x max_seq_len) its sequences hold now.", "model", "version"),
		genTTFT: r.NewHistogramVec("xserve_generate_time_to_first_token_seconds",
			"Time from a generation request's arrival at the loop (queue and prefill) to its first token.", tokenBuckets, "model", "version"),
		genInterToken: r.NewHistogramVec("xserve_generate_inter_token_seconds",
			"Time between two tokens of one sequence (the decode steps and the prefills interleaved between them); its rate is tokens/s per stream.", tokenBuckets, "model", "version"),
		compilations: r.NewCounterVec("xserve_compilations_total",
			"Executables compiled, by shape bucket.", "model", "version", "bucket"),
		compileSeconds: r.NewHistogramVec("xserve_compile_seconds",
			"Time to lower (or read from the cache) and compile one bucket's executable.", compileBuckets, "model", "version"),
		bucketCompile: r.NewGaugeVec("xserve_bucket_compile_seconds",
			"Seconds the last compile of each bucket took (lowering included).", "model", "version", "bucket"),
		cache: r.NewCounterVec("xserve_compile_cache_total",
			"On-disk compile cache lookups, by kind of entry and result: hit, miss, corrupt (an entry whose checksum failed, or that did not deserialize or compile; deleted and rebuilt).", "kind", "result"),
		exactExes: r.NewGaugeVec("xserve_exact_executables",
			"Executables a version keeps for sizes it serves exactly (a symbol whose padding would change the outputs), at most exact_executables.", "model", "version"),
		exactEvicted: r.NewCounterVec("xserve_exact_evictions_total",
			"Exact-size executables dropped from the bounded cache (least recently used first).", "model", "version"),
		splitRuns: r.NewCounterVec("xserve_split_executions_total",
			"Executions whose rows ran as shards on idle CPU cores at once, each shard in a smaller batch bucket (Options.SplitBatches, --split-batches).", "model", "version"),
		loaded: r.NewGaugeVec("xserve_models_loaded", "Model versions in state READY."),
		pipelineExecutions: r.NewGaugeVec("xserve_pipeline_executions",
			"Program executions one request of a pipeline makes: 1 when all its steps are stitched into one executable per bucket, one more per step that runs on its own.", "model", "version"),
		pipelineHandoffs: r.NewCounterVec("xserve_pipeline_handoffs_total",
			"Intermediates one device segment of a pipeline made and the next took: path=device as a device buffer (no host copy), path=host through the host (the next segment's bucket shape differed).", "model", "version", "path"),
		reloadFailures: r.NewCounterVec("xserve_model_reload_failures_total",
			"Reloads of a changed model file or config.yaml that failed (the loaded instance kept serving).", "model", "version"),
		stale: r.NewGaugeVec("xserve_model_stale",
			"1 while a READY version serves an instance loaded from an older model file or config.yaml because reloading the current one failed; 0 otherwise.", "model", "version"),
		state: r.NewGaugeVec("xserve_model_state",
			"1 for the state each known model version is in, 0 for the others.", "model", "version", "state"),
		loads: r.NewCounterVec("xserve_model_loads_total",
			"Models loaded on demand, by a request that found them not loaded (--model-load-policy lazy).", "model"),
		evictions: r.NewCounterVec("xserve_model_evictions_total",
			"Models unloaded to make room in the device memory budget for another one, least recently used first (--model-load-policy lazy).", "model"),
		loadWait: r.NewHistogramVec("xserve_model_load_wait_seconds",
			"Time a request waited for its model to load on demand (--model-load-policy lazy), until the load ended or the request gave up.",
			compileBuckets, "model"),
		loadWaiting: r.NewGaugeVec("xserve_model_load_waiting",
			"Requests waiting now for their model to load on demand (--model-load-policy lazy)."),
		memory: r.NewGaugeVec("xserve_model_memory_bytes",
			"Device memory each loaded model takes as the memory budget counts it: its weights on the device, or its model files while larger (read at each scrape).", "model"),
		memoryUsed: r.NewGaugeVec("xserve_model_memory_used_bytes",
			"Device memory the loaded models take together, per device (read at each scrape).", "device"),
		memoryBudget: r.NewGaugeVec("xserve_model_memory_budget_bytes",
			"The device memory budget of the loaded models (--model-memory-budget), per device; 0 is unbounded.", "device"),
		deviceMemory: r.NewGaugeVec("xserve_device_memory_bytes",
			"Device memory the loaded models' weights take on each device of the client (read at each scrape).", "device"),
		deviceExecutions: r.NewCounterVec("xserve_device_executions_total",
			"Executions of requests' batches on each device of the client (a model placed on several devices runs each on the one with the fewest in flight).", "device"),
	}
	m.deviceLoad = newDeviceLoad(
		r.NewCounterVec("xserve_device_busy_seconds_total",
			"Wall time each device of the client had at least one execution of a request's batch in flight (upload, execute, download): rate() of it is the device's utilisation.", "device"),
		r.NewGaugeVec("xserve_device_executions_in_flight",
			"Executions of requests' batches in flight on each device of the client now.", "device"))
	m.loadWaiting.With()
	for _, kind := range []string{engine.CacheStableHLO, engine.CacheExecutable} {
		m.cache.With(kind, "hit")
		m.cache.With(kind, "miss")
		m.cache.With(kind, "corrupt")
	}
	return m
}

// cacheResult counts one compile-cache lookup.
func (m *serverMetrics) cacheResult(kind string, hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	m.cache.With(kind, result).Inc()
}

// cacheCorrupt counts a compile-cache entry found corrupt (and deleted).
func (m *serverMetrics) cacheCorrupt(kind string) {
	m.cache.With(kind, "corrupt").Inc()
}

// setState records that a version is in state s.
func (m *serverMetrics) setState(model, version string, s ModelState) {
	for _, st := range allStates {
		v := 0.0
		if st == s {
			v = 1
		}
		m.state.With(model, version, string(st)).Set(v)
	}
}

// forgetState removes a version's state series.
func (m *serverMetrics) forgetState(model, version string) {
	for _, st := range allStates {
		m.state.Delete(model, version, string(st))
	}
	m.stale.Delete(model, version)
	m.pipelineExecutions.Delete(model, version)
	m.pipelineHandoffs.Delete(model, version, handoffDevice)
	m.pipelineHandoffs.Delete(model, version, handoffHost)
}

// requestSeries are the series a version's successful requests update:
// looked up by label values once, not on each request. A failure's series
// are looked up when it happens, so that they appear with the first one.
type requestSeries struct {
	success               *metrics.Counter
	total, queue, compute *metrics.Histogram
}

// requestSeries returns v's request series, made on the first request.
func (v *version) requestSeries() *requestSeries {
	v.seriesOnce.Do(func() {
		mt := v.m.metrics
		v.series = &requestSeries{
			success: mt.requests.With(v.name, v.label, outcomeSuccess),
			total:   mt.duration.With(v.name, v.label, phaseTotal),
			queue:   mt.duration.With(v.name, v.label, phaseQueue),
			compute: mt.duration.With(v.name, v.label, phaseCompute),
		}
	})
	return v.series
}
