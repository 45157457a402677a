package generate

import (
	"context"
	"sync"
)

// FinishReason says why a sequence ended.
type FinishReason string

// Finish reasons, as OpenAI's API names the first two.
const (
	// FinishStop: an end-of-sequence or stop token, or a stop condition.
	FinishStop FinishReason = "stop"
	// FinishLength: max_tokens, or the sequence filled its cache slot.
	FinishLength FinishReason = "length"
	// FinishCancelled: the caller went away or closed the stream.
	FinishCancelled FinishReason = "cancelled"
	// FinishDeadline: the request's deadline passed.
	FinishDeadline FinishReason = "deadline"
	// FinishError: the step failed; Event.Err says why.
	FinishError FinishReason = "error"
)

// Event is one step of a sequence: a new token, or the end.
type Event struct {
	// Token is the new token; valid when Done is false.
	Token int64
	// Done marks the last event, which carries no token.
	Done bool
	// Reason says why the sequence ended (Done only).
	Reason FinishReason
	// Err is the failure of a FinishError.
	Err error
	// PromptTokens and Generated count the sequence's tokens (Done only).
	PromptTokens, Generated int
}

// Stream is the events of one sequence, in order: its tokens as they are
// generated, then one Done event. The loop never waits for the reader: a
// stream queues what its reader has not taken yet (at most max_tokens
// events). Close cancels the sequence, freeing its slot at the next step
// boundary.
type Stream struct {
	mu     sync.Mutex
	queue  []Event
	notify chan struct{} // signalled (non-blocking) on push
	done   bool          // the Done event was pushed
	cancel context.CancelFunc
}

func newStream(cancel context.CancelFunc) *Stream {
	return &Stream{notify: make(chan struct{}, 1), cancel: cancel}
}

// push queues ev; called by the loop only.
func (s *Stream) push(ev Event) {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	s.queue = append(s.queue, ev)
	s.done = ev.Done
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Next returns the next event, waiting for it. After the Done event it
// keeps returning it. When ctx ends first, Next returns ctx's error.
func (s *Stream) Next(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			ev := s.queue[0]
			if !ev.Done {
				s.queue = s.queue[1:]
			}
			s.mu.Unlock()
			return ev, nil
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Close cancels the sequence if it is still running; its Done event
// (FinishCancelled) follows once the loop frees its slot.
func (s *Stream) Close() { s.cancel() }
