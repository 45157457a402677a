package natsapi

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/xserve/xserve/serving"
)

// endpointSpec is one micro endpoint: a model's request subject, or the
// any-model subject (model "").
type endpointSpec struct {
	name     string
	model    string
	subject  string
	warm     bool // PREFIX.warm.<model>: the replica holds the model (Options.OnDemand)
	metadata map[string]string
}

// Sync registers the endpoints of the models the backend serves READY now,
// when they differ from those registered: a new micro service instance with
// the new endpoints subscribes before the old one drains, so requests are
// never without a subscriber. The server calls it every
// Options.SyncInterval; call it to follow a load or unload at once.
func (s *Server) Sync() error {
	specs := s.endpointSpecs()
	fp := fingerprint(specs)
	s.svcMu.Lock()
	defer s.svcMu.Unlock()
	if s.svc != nil && fp == s.fingerprint {
		return nil
	}
	if s.closing.Load() {
		return nil
	}
	s.statsMu.Lock()
	for _, sp := range specs {
		if sp.model != "" {
			s.served[sp.model] = true // kept after an unload: the counts stay
		}
	}
	s.statsMu.Unlock()
	svc, err := s.newService(specs)
	if err != nil {
		return err
	}
	// The new subscriptions are on the server before the old ones go (and
	// before New returns).
	if err := s.nc.FlushTimeout(10 * time.Second); err != nil {
		s.log.Warn("natsapi: flushing the new subscriptions", "err", err)
	}
	s.live.Store(subjects(specs))
	old := s.svc
	s.svc, s.fingerprint = svc, fp
	s.replica.Store(svc.Info().ID)
	if old != nil {
		if err := old.Stop(); err != nil {
			s.log.Warn("natsapi: stopping the previous service instance", "err", err)
		}
		// Stop drains: its unsubscriptions are only queued on the
		// connection. Once Sync returns, an unloaded model's subject must
		// have no responders, so the server has to have them.
		if err := s.nc.FlushTimeout(10 * time.Second); err != nil {
			s.log.Warn("natsapi: flushing the previous instance's unsubscriptions", "err", err)
		}
	}
	var models, held []string
	for _, sp := range specs {
		switch {
		case sp.warm:
			held = append(held, sp.model)
		case sp.model != "":
			models = append(models, sp.model)
		}
	}
	attrs := []any{"service", s.opts.ServiceName, "id", s.ID(), "models", models,
		"subject", inferSubject(s.opts.Prefix, "<model>"), "queue_group", s.opts.QueueGroup}
	if s.opts.OnDemand {
		attrs = append(attrs, "held", held)
	}
	s.log.Info("NATS endpoints registered", attrs...)
	return nil
}

// subjects is the set of specs' subjects.
func subjects(specs []endpointSpec) *map[string]bool {
	set := make(map[string]bool, len(specs))
	for _, sp := range specs {
		set[sp.subject] = true
	}
	return &set
}

func (s *Server) syncLoop() {
	defer close(s.syncDone)
	var tick <-chan time.Time // nil, never ready, with SyncInterval -1
	if s.opts.SyncInterval > 0 {
		t := time.NewTicker(s.opts.SyncInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.syncStop:
			return
		case <-tick:
		case <-s.syncNow: // Health found a model without its endpoint
		}
		if err := s.Sync(); err != nil {
			s.log.Error("natsapi: cannot update the NATS endpoints; the registered ones keep serving", "err", err)
		}
	}
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// models lists, sorted, the models with a request endpoint (the backend's
// READY ones; with Options.OnDemand also those that can load) and those
// held (READY).
func (s *Server) models() (names, held []string) {
	for _, st := range s.backend.Status() {
		ready := st.State == serving.StateReady
		if ready && !slices.Contains(held, st.Name) {
			held = append(held, st.Name)
		}
		if (ready || s.opts.OnDemand && st.Unloaded) && !slices.Contains(names, st.Name) {
			names = append(names, st.Name)
		}
	}
	slices.Sort(names)
	slices.Sort(held)
	return names, held
}

// Health is the replica's readiness on NATS, a check for
// serving.Manager.AddReadinessCheck: an error while a model with a request
// endpoint (see endpointSpecs) has none subscribed on the NATS server yet
// (a model that has just turned READY, until the next Sync, which it asks
// for), and while the durable consumer is gone (DurableHealth). The
// endpoints of the models held on demand (PREFIX.warm.) do not count: a
// load on demand does not make the server unready.
func (s *Server) Health() error {
	if err := s.DurableHealth(); err != nil {
		return err
	}
	live := s.live.Load()
	names, _ := s.models()
	for _, n := range names {
		if live == nil || !(*live)[inferSubject(s.opts.Prefix, n)] {
			select {
			case s.syncNow <- struct{}{}:
			default:
			}
			return fmt.Errorf("natsapi: model %q has no NATS endpoint yet", n)
		}
	}
	return nil
}

// endpointSpecs lists the endpoints for the backend's READY models, sorted,
// after the any-model endpoint. With Options.OnDemand, every model that can
// load gets one, and each READY model a warm endpoint too.
func (s *Server) endpointSpecs() []endpointSpec {
	names, held := s.models()
	used := map[string]bool{}
	unique := func(n string) string {
		name := n
		for i := 2; used[name]; i++ {
			name = n + "-" + strconv.Itoa(i)
		}
		used[name] = true
		return name
	}
	specs := []endpointSpec{{
		name:    unique("infer"),
		subject: inferSubject(s.opts.Prefix, ""),
		metadata: map[string]string{
			"model":  "*",
			"models": strings.Join(names, ","),
			"about":  `any model: the body names it ("model")`,
		},
	}}
	if s.opts.OnDemand {
		specs[0].metadata["held"] = strings.Join(held, ",")
	}
	for _, n := range names {
		meta := map[string]string{"model": n}
		if md, err := s.backend.Metadata(n, 0); err == nil {
			meta = modelMetadata(md)
		} else if !s.opts.OnDemand {
			continue // no longer READY
		}
		if s.opts.OnDemand {
			meta["held"] = strconv.FormatBool(slices.Contains(held, n))
		}
		specs = append(specs, endpointSpec{
			name:     unique(unsafeName.ReplaceAllString(n, "_")),
			model:    n,
			subject:  inferSubject(s.opts.Prefix, n),
			metadata: meta,
		})
	}
	specs = append(specs, s.sequenceSpecs(names, unique)...)
	if s.opts.OnDemand {
		for _, n := range held {
			specs = append(specs, endpointSpec{
				name:     unique("warm_" + unsafeName.ReplaceAllString(n, "_")),
				model:    n,
				subject:  warmSubject(s.opts.Prefix, n),
				warm:     true,
				metadata: map[string]string{"model": n, "held": "true", "about": "the replicas holding the model loaded; others forward its requests here"},
			})
		}
	}
	if s.opts.Durable {
		for i := range specs {
			if !specs[i].warm {
				specs[i].metadata["durable_subject"] = durableSubject(s.opts.Prefix, specs[i].model)
			}
		}
	}
	return specs
}

// modelMetadata is an endpoint's metadata: the model's versions, platform,
// buckets and signature.
func modelMetadata(md *serving.Metadata) map[string]string {
	versions := md.Versions
	if len(versions) == 0 {
		versions = []int64{md.Version}
	}
	vs := make([]string, len(versions))
	for i, v := range versions {
		vs[i] = strconv.FormatInt(v, 10)
	}
	syms := make([]string, 0, len(md.Buckets))
	for sym := range md.Buckets {
		syms = append(syms, sym)
	}
	slices.Sort(syms)
	var buckets []string
	for _, sym := range syms {
		sizes := make([]string, len(md.Buckets[sym]))
		for i, n := range md.Buckets[sym] {
			sizes[i] = strconv.FormatInt(n, 10)
		}
		buckets = append(buckets, sym+"="+strings.Join(sizes, ","))
	}
	sig := func(specs []serving.TensorSpec) string {
		parts := make([]string, len(specs))
		for i, t := range specs {
			dims := t.Dims
			if len(dims) == 0 {
				for _, d := range t.Shape {
					dims = append(dims, strconv.FormatInt(d, 10))
				}
			}
			parts[i] = fmt.Sprintf("%s:%s[%s]", t.Name, t.DType, strings.Join(dims, ","))
		}
		return strings.Join(parts, " ")
	}
	return map[string]string{
		"model":    md.Name,
		"version":  strconv.FormatInt(md.Version, 10),
		"versions": strings.Join(vs, ","),
		"platform": md.Platform,
		"buckets":  strings.Join(buckets, ";"),
		"inputs":   sig(md.Inputs),
		"outputs":  sig(md.Outputs),
	}
}

// fingerprint identifies a set of endpoints, to tell whether it changed.
func fingerprint(specs []endpointSpec) string {
	var b strings.Builder
	for _, sp := range specs {
		b.WriteString(sp.name + "\x00" + sp.subject + "\x00")
		keys := make([]string, 0, len(sp.metadata))
		for k := range sp.metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b.WriteString(k + "=" + sp.metadata[k] + "\x00")
		}
		b.WriteString("\x01")
	}
	return b.String()
}

// semver matches what micro accepts as a version.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$`)

// newService registers a micro service instance with specs' endpoints.
func (s *Server) newService(specs []endpointSpec) (micro.Service, error) {
	version := strings.TrimPrefix(s.opts.Version, "v")
	if !semver.MatchString(version) {
		version = "0.0.0"
	}
	meta := map[string]string{
		"on_demand":      strconv.FormatBool(s.opts.OnDemand),
		"xserve_version": s.opts.Version,
		"subject":        inferSubject(s.opts.Prefix, "<model>"),
		"queue_group":    s.opts.QueueGroup,
		"workers":        strconv.Itoa(s.opts.Workers),
		"queue_size":     strconv.Itoa(s.opts.QueueSize),
		"durable":        strconv.FormatBool(s.opts.Durable),
	}
	if s.opts.Durable {
		meta["stream"] = s.opts.Stream
		meta["consumer"] = s.opts.Consumer
		meta["durable_subject"] = durableSubject(s.opts.Prefix, "<model>")
	}
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:         s.opts.ServiceName,
		Version:      version,
		Description:  "xserve inference over NATS request-reply (docs/NATS.md)",
		Metadata:     meta,
		QueueGroup:   s.opts.QueueGroup,
		StatsHandler: s.endpointData,
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			s.log.Warn("natsapi: subscription error", "subject", e.Subject, "err", e.Description)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("natsapi: register service %q: %w", s.opts.ServiceName, err)
	}
	for _, sp := range specs {
		err := svc.AddEndpoint(sp.name, s.handler(sp.model, sp.warm, s.statsFor(sp.model)),
			micro.WithEndpointSubject(sp.subject),
			micro.WithEndpointMetadata(sp.metadata),
			micro.WithEndpointPendingLimits(s.opts.PendingMsgs, s.opts.PendingBytes))
		if err != nil {
			svc.Stop()
			return nil, fmt.Errorf("natsapi: endpoint %s on %s: %w", sp.name, sp.subject, err)
		}
	}
	err = svc.AddEndpoint("health", micro.HandlerFunc(s.health),
		micro.WithEndpointSubject(healthSubject(s.opts.Prefix)),
		micro.WithEndpointMetadata(map[string]string{"about": "readiness, as HTTP's /v2/health/ready and gRPC's ServerReady answer it"}))
	if err != nil {
		svc.Stop()
		return nil, fmt.Errorf("natsapi: endpoint health on %s: %w", healthSubject(s.opts.Prefix), err)
	}
	return svc, nil
}

// health answers PREFIX.health with the backend's readiness: {"ready":
// true}, or the 503 error reply HTTP's /v2/health/ready answers with (its
// public message) while the server is not ready or shutting down.
func (s *Server) health(r micro.Request) {
	if !s.validReply(r.Reply()) {
		s.log.Debug("natsapi: health request with an invalid reply subject dropped", "reply", r.Reply())
		return
	}
	msg := &nats.Msg{Subject: r.Reply(), Header: nats.Header{}, Data: []byte(`{"ready":true}`)}
	msg.Header.Set(HeaderContentType, "application/json")
	rd := s.backend.Readiness()
	if s.closing.Load() {
		rd = serving.Readiness{Reason: "the server is shutting down"}
	}
	if !rd.Ready {
		msg = errorReply(fmt.Errorf("%w: %s", serving.ErrNotReady, rd.Reason), http.StatusServiceUnavailable, s.root)
		msg.Subject = r.Reply()
	}
	msg.Header.Set(HeaderReplica, s.ID())
	if err := s.nc.PublishMsg(msg); err != nil {
		s.log.Warn("natsapi: cannot publish the health reply", "reply_to", r.Reply(), "err", err)
	}
}

// endpointData is micro's StatsHandler: the replica's own counts of the
// endpoint's model.
func (s *Server) endpointData(e *micro.Endpoint) any {
	if e.Subject == healthSubject(s.opts.Prefix) {
		return nil
	}
	model := strings.TrimPrefix(strings.TrimPrefix(e.Subject, inferSubject(s.opts.Prefix, "")), ".")
	if m, ok := strings.CutPrefix(e.Subject, warmSubject(s.opts.Prefix, "")); ok {
		model = m
	}
	return s.data(s.statsFor(model))
}
