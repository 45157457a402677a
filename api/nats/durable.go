package natsapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// durable consumes the stream of durable requests.
type durable struct {
	js jetstream.JetStream

	mu       sync.Mutex // guards cons, it and stopping
	cons     jetstream.Consumer
	it       jetstream.MessagesContext
	stopping bool // stopDurable began: no restore

	// lost is 1 from the moment the consumer (or its stream) is found
	// deleted until both are back; restores counts them (atomic).
	lost     atomic.Bool
	restores atomic.Int64
	// slots bounds the durable requests taken and not yet finished to
	// Options.Workers: the consumer pulls only what the replica can start.
	slots chan struct{}
	done  chan struct{} // closed when the consume loop returns
}

// durableSetupWait bounds how long setupDurable tries again while the
// JetStream API is unavailable.
const durableSetupWait = time.Minute

// setupDurable creates (or updates to opts) the work-queue stream and the
// shared durable pull consumer. In a NATS cluster the JetStream API is
// unavailable for the seconds of an election after a node is lost: a
// replica starting then tries again, with backoff, for durableSetupWait.
func (s *Server) setupDurable(ctx context.Context) (*durable, error) {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, fmt.Errorf("natsapi: JetStream: %w", err)
	}
	deadline := time.Now().Add(durableSetupWait)
	var cons jetstream.Consumer
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		cons, err = s.createDurable(ctx, js)
		if err == nil || !jetStreamUnavailable(err) || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			break
		}
		s.log.Warn("natsapi: JetStream unavailable (a NATS cluster electing a leader?); trying again", "err", err, "in", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	if err != nil {
		return nil, err
	}
	return &durable{js: js, cons: cons, slots: make(chan struct{}, s.opts.Workers), done: make(chan struct{})}, nil
}

// createDurable creates (or updates) the stream and the consumer.
func (s *Server) createDurable(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	base := durableSubject(s.opts.Prefix, "")
	dups := min(2*time.Minute, s.opts.StreamMaxAge)
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        s.opts.Stream,
		Description: "xserve durable inference requests (docs/NATS.md)",
		Subjects:    []string{base, base + ".>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    s.opts.StreamReplicas,
		MaxAge:      s.opts.StreamMaxAge,
		Duplicates:  dups,
		Discard:     jetstream.DiscardOld,
	})
	if err != nil {
		return nil, fmt.Errorf("natsapi: create or update stream %s on %s and %s.>: %w (is JetStream enabled on the NATS server?)", s.opts.Stream, base, base, err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, s.opts.Stream, jetstream.ConsumerConfig{
		Durable:     s.opts.Consumer,
		Description: "xserve replicas (shared)",
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     s.opts.AckWait,
		MaxDeliver:  s.opts.MaxDeliver,
	})
	if err != nil {
		return nil, fmt.Errorf("natsapi: create or update consumer %s on stream %s: %w", s.opts.Consumer, s.opts.Stream, err)
	}
	return cons, nil
}

// jetStreamUnavailable reports whether a JetStream API error may pass: the
// API says it is temporarily unavailable (503), or nothing answered in time.
func jetStreamUnavailable(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.Code == 503
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders)
}

// startDurable starts pulling durable requests.
func (s *Server) startDurable() error {
	d := s.durable
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := s.pullLocked(); err != nil {
		return err
	}
	go s.consume()
	s.log.Info("NATS durable requests", "stream", s.opts.Stream, "consumer", s.opts.Consumer,
		"subject", durableSubject(s.opts.Prefix, "<model>"), "ack_wait", s.opts.AckWait, "max_deliver", s.opts.MaxDeliver)
	return nil
}

// pullLocked starts a pull iterator on the consumer; d.mu is held.
func (s *Server) pullLocked() error {
	d := s.durable
	// Pull ahead only a little: a request waiting in this replica's buffer
	// is one no other replica can take, and its AckWait is running. A
	// missing heartbeat is reported, so that a consumer deleted without its
	// "consumer deleted" notice reaching us is noticed too.
	it, err := d.cons.Messages(jetstream.PullMaxMessages(min(s.opts.Workers, 4)),
		jetstream.PullHeartbeat(s.opts.DurableHeartbeat), jetstream.WithMessagesErrOnMissingHeartbeat(true))
	if err != nil {
		return fmt.Errorf("natsapi: consume %s/%s: %w", s.opts.Stream, s.opts.Consumer, err)
	}
	d.it = it
	return nil
}

// iterator returns the current pull iterator.
func (d *durable) iterator() jetstream.MessagesContext {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.it
}

// consumerLost reports whether a pull error means that the consumer or its
// stream is gone (deleted by an operator, a purge of the server's state, a
// restarted server without its store) or no longer answers.
func consumerLost(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
		errors.Is(err, jetstream.ErrBadRequest)
}

// restoreDurable re-creates the stream and the consumer after consumerLost
// and pulls from them again, retrying until it succeeds or the server stops
// pulling. Health reports the loss meanwhile.
func (s *Server) restoreDurable(cause error) {
	d := s.durable
	if !d.lost.Swap(true) {
		s.log.Error("natsapi: the durable consumer or its stream is gone; re-creating them", "stream", s.opts.Stream, "consumer", s.opts.Consumer, "err", cause)
	}
	// The consumer learns of a deleted stream before the server has
	// finished deleting it: creating the stream at once would find the old
	// one and leave a stream that takes no messages. Let it finish first.
	for wait := 500 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(wait):
		}
		d.mu.Lock()
		if d.stopping {
			d.mu.Unlock()
			return
		}
		if d.it != nil {
			d.it.Stop()
		}
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		cons, err := s.createDurable(ctx, d.js)
		cancel()
		if err == nil {
			d.cons = cons
			err = s.pullLocked()
		}
		d.mu.Unlock()
		if err == nil {
			d.restores.Add(1)
			d.lost.Store(false)
			s.log.Warn("natsapi: durable stream and consumer re-created; pulling again", "stream", s.opts.Stream, "consumer", s.opts.Consumer)
			return
		}
		s.log.Warn("natsapi: cannot re-create the durable stream and consumer yet", "err", err, "retry_in", wait)
	}
}

// DurableHealth is nil without durable requests or while the durable
// consumer serves; an error saying what is missing from the moment the
// consumer or its stream is found deleted until they are re-created.
func (s *Server) DurableHealth() error {
	if s.durable == nil || !s.durable.lost.Load() {
		return nil
	}
	return fmt.Errorf("natsapi: the durable consumer %s or its stream %s is gone; re-creating them", s.opts.Consumer, s.opts.Stream)
}

// consume takes durable requests while a worker slot is free and queues
// them on the worker pool, until the iterator is drained.
func (s *Server) consume() {
	d := s.durable
	defer close(d.done)
	base := durableSubject(s.opts.Prefix, "")
	for {
		d.slots <- struct{}{}
		msg, err := d.iterator().Next()
		if err != nil {
			<-d.slots
			if consumerLost(err) {
				s.restoreDurable(err)
				continue
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			s.log.Warn("natsapi: durable consumer", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		j := &job{
			model:    strings.TrimPrefix(strings.TrimPrefix(msg.Subject(), base), "."),
			header:   msg.Headers(),
			data:     msg.Data(),
			received: time.Now(),
			msg:      msg,
			done:     func() { <-d.slots },
			lease:    s.budget.Lease(),
		}
		if md, err := msg.Metadata(); err == nil {
			j.sent = md.Timestamp
		}
		j.reply = headerValue(j.header, HeaderReplyTo)
		if !s.validReply(j.reply) {
			s.log.Warn("natsapi: durable request without a valid reply subject dropped", "subject", msg.Subject(), HeaderReplyTo, j.reply, "id", requestID(j.header))
			msg.TermWithReason("no valid " + HeaderReplyTo + " header")
			j.done()
			continue
		}
		if strings.HasPrefix(j.model, durableGeneratePrefix) {
			model := strings.TrimPrefix(j.model, durableGeneratePrefix)
			s.gens.Go(func() { s.durableGenerate(msg, model, j.reply, j.done) })
			continue
		}
		j.stats = s.statsFor(j.model)
		if err := j.lease.Reserve(int64(len(j.data)), "the request body"); err != nil {
			s.finish(j, nil, err) // handed back for redelivery
			continue
		}
		if err := s.enqueue(j, true); err != nil {
			s.finish(j, nil, err)
		}
	}
}

// reportProgress tells JetStream, every half AckWait, that msg is still
// being worked on, so that a slow request is not redelivered; the returned
// func stops it.
func (s *Server) reportProgress(msg interface{ InProgress() error }) func() {
	var mu sync.Mutex
	stopped := false
	every := s.opts.AckWait / 2
	var t *time.Timer
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		msg.InProgress()
		t.Reset(every)
	})
	return func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		t.Stop()
	}
}

// stopDurable stops pulling: the requests already pulled are still queued
// and answered.
func (s *Server) stopDurable(ctx context.Context) error {
	d := s.durable
	d.mu.Lock()
	d.stopping = true
	it := d.it
	d.mu.Unlock()
	if it == nil {
		return nil
	}
	it.Drain()
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		it.Stop()
		return fmt.Errorf("natsapi: shutdown: stopping the durable consumer: %w", ctx.Err())
	}
}
