package natsapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// durable consumes the stream of durable requests.
type durable struct {
	js   jetstream.JetStream
	cons jetstream.Consumer
	it   jetstream.MessagesContext
	// slots bounds the durable requests taken and not yet finished to
	// Options.Workers: the consumer pulls only what the replica can start.
	slots chan struct{}
	done  chan struct{} // closed when the consume loop returns
}

// setupDurable creates (or updates to opts) the work-queue stream and the
// shared durable pull consumer.
func (s *Server) setupDurable(ctx context.Context) (*durable, error) {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, fmt.Errorf("natsapi: JetStream: %w", err)
	}
	base := durableSubject(s.opts.Prefix, "")
	dups := min(2*time.Minute, s.opts.StreamMaxAge)
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
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
	return &durable{js: js, cons: cons, slots: make(chan struct{}, s.opts.Workers), done: make(chan struct{})}, nil
}

// startDurable starts pulling durable requests.
func (s *Server) startDurable() error {
	d := s.durable
	// Pull ahead only a little: a request waiting in this replica's buffer
	// is one no other replica can take, and its AckWait is running.
	it, err := d.cons.Messages(jetstream.PullMaxMessages(min(s.opts.Workers, 4)))
	if err != nil {
		return fmt.Errorf("natsapi: consume %s/%s: %w", s.opts.Stream, s.opts.Consumer, err)
	}
	d.it = it
	go s.consume()
	s.log.Info("NATS durable requests", "stream", s.opts.Stream, "consumer", s.opts.Consumer,
		"subject", durableSubject(s.opts.Prefix, "<model>"), "ack_wait", s.opts.AckWait, "max_deliver", s.opts.MaxDeliver)
	return nil
}

// consume takes durable requests while a worker slot is free and queues
// them on the worker pool, until the iterator is drained.
func (s *Server) consume() {
	d := s.durable
	defer close(d.done)
	base := durableSubject(s.opts.Prefix, "")
	for {
		d.slots <- struct{}{}
		msg, err := d.it.Next()
		if err != nil {
			<-d.slots
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
		}
		j.stats = s.statsFor(j.model)
		if md, err := msg.Metadata(); err == nil {
			j.sent = md.Timestamp
		}
		j.reply = headerValue(j.header, HeaderReplyTo)
		if !s.validReplySubject(j.reply) {
			s.log.Warn("natsapi: durable request without a valid reply subject dropped", "subject", msg.Subject(), HeaderReplyTo, j.reply, "id", requestID(j.header))
			msg.TermWithReason("no valid " + HeaderReplyTo + " header")
			j.done()
			continue
		}
		if err := s.enqueue(j, true); err != nil {
			s.finish(j, nil, err)
		}
	}
}

// validReplySubject reports whether a durable request's reply may go to
// subj: a subject of non-empty tokens without wildcards, outside the
// server's own subjects (a reply there would be a request again) and the
// system's ("$JS", "$SRV", ...).
func (s *Server) validReplySubject(subj string) bool {
	if subj == "" || strings.ContainsAny(subj, " \t\r\n*>") || strings.HasPrefix(subj, "$") ||
		subj == s.opts.Prefix || strings.HasPrefix(subj, s.opts.Prefix+".") {
		return false
	}
	for _, t := range strings.Split(subj, ".") {
		if t == "" {
			return false
		}
	}
	return true
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
	if d.it == nil {
		return nil
	}
	d.it.Drain()
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		d.it.Stop()
		return fmt.Errorf("natsapi: shutdown: stopping the durable consumer: %w", ctx.Err())
	}
}
