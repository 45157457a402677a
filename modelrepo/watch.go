package modelrepo

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// DefaultWatchInterval is the polling interval Watch uses when given one <= 0.
const DefaultWatchInterval = 5 * time.Second

// ChangeKind says what a Change is about.
type ChangeKind int

const (
	// ModelAdded: a model directory appeared. Entry is the new model, with
	// all its versions; no VersionAdded follows for them.
	ModelAdded ChangeKind = iota + 1
	// ModelRemoved: a model directory disappeared. Entry is the model as it
	// was; no VersionRemoved follows.
	ModelRemoved
	// VersionAdded: a valid version appeared (a new directory, or a broken
	// one that became valid).
	VersionAdded
	// VersionRemoved: a valid version disappeared (removed, or broken).
	VersionRemoved
	// VersionChanged: a version's model file changed: its size, modification
	// time or format differ (for a pipeline: one of its steps' model files,
	// see VersionEntry.Steps).
	VersionChanged
	// ConfigChanged: the model's Config differs (including becoming nil when
	// config.yaml broke, or non-nil when it was fixed).
	ConfigChanged
	// ModelError: a model's Err (Version 0) or one version's error (Version
	// set) changed. Err is the new error, or nil when the error cleared.
	// Watch also reports a failing Scan of the whole repository as a
	// ModelError with Model "", once until a Scan succeeds again.
	ModelError
)

var changeKindNames = [...]string{
	ModelAdded:     "model added",
	ModelRemoved:   "model removed",
	VersionAdded:   "version added",
	VersionRemoved: "version removed",
	VersionChanged: "version changed",
	ConfigChanged:  "config changed",
	ModelError:     "model error",
}

// String reads "model added", "version changed", ...
func (k ChangeKind) String() string {
	if k > 0 && int(k) < len(changeKindNames) {
		return changeKindNames[k]
	}
	return fmt.Sprintf("ChangeKind(%d)", int(k))
}

// Change is one difference between two snapshots.
type Change struct {
	// Kind says what changed.
	Kind ChangeKind
	// Model is the model's name.
	Model string
	// Version is the version concerned, 0 for changes to the whole model.
	Version int64
	// Entry is the model's entry in the new snapshot (in the old one for
	// ModelRemoved). It points into a snapshot: read it, don't modify it.
	Entry *ModelEntry
	// Err is the new error of a ModelError (nil when it cleared).
	Err error
}

// String reads `version added: resnet 2` or `model error: resnet: <err>`.
func (c Change) String() string {
	var b strings.Builder
	b.WriteString(c.Kind.String())
	b.WriteString(": ")
	b.WriteString(c.Model)
	if c.Version != 0 {
		fmt.Fprintf(&b, " %d", c.Version)
	}
	if c.Kind == ModelError {
		if c.Err != nil {
			fmt.Fprintf(&b, ": %v", c.Err)
		} else {
			b.WriteString(": cleared")
		}
	}
	return b.String()
}

// Diff returns the changes that turn old into new (either may be nil, read
// as empty), in a deterministic order: models by name; for a model present
// in both, ConfigChanged, then ModelError for the model, then for each
// version in ascending order VersionRemoved, VersionAdded or VersionChanged
// followed by a ModelError for that version if its error changed. A new
// model gives ModelAdded followed by ModelErrors for its errors; a removed
// one gives ModelRemoved alone.
func Diff(old, new *Snapshot) []Change {
	var olds, news []ModelEntry
	if old != nil {
		olds = old.Models
	}
	if new != nil {
		news = new.Models
	}
	var out []Change
	i, j := 0, 0
	for i < len(olds) || j < len(news) {
		switch {
		case j == len(news) || (i < len(olds) && olds[i].Name < news[j].Name):
			out = append(out, Change{Kind: ModelRemoved, Model: olds[i].Name, Entry: &olds[i]})
			i++
		case i == len(olds) || news[j].Name < olds[i].Name:
			out = diffModel(out, nil, &news[j])
			j++
		default:
			out = diffModel(out, &olds[i], &news[j])
			i++
			j++
		}
	}
	return out
}

// diffModel appends the changes of one model present in the new snapshot.
func diffModel(out []Change, o, n *ModelEntry) []Change {
	if o == nil {
		out = append(out, Change{Kind: ModelAdded, Model: n.Name, Entry: n})
		o = &ModelEntry{Name: n.Name, Config: n.Config, Versions: n.Versions}
	} else if !reflect.DeepEqual(o.Config, n.Config) {
		out = append(out, Change{Kind: ConfigChanged, Model: n.Name, Entry: n})
	}
	if errText(o.Err) != errText(n.Err) {
		out = append(out, Change{Kind: ModelError, Model: n.Name, Entry: n, Err: n.Err})
	}

	var versions []int64
	for _, v := range o.Versions {
		versions = append(versions, v.Version)
	}
	for _, v := range n.Versions {
		versions = append(versions, v.Version)
	}
	for v := range o.VersionErrors {
		versions = append(versions, v)
	}
	for v := range n.VersionErrors {
		versions = append(versions, v)
	}
	slices.Sort(versions)
	versions = slices.Compact(versions)

	for _, v := range versions {
		ov, inOld := o.Version(v)
		nv, inNew := n.Version(v)
		switch {
		case inOld && !inNew:
			out = append(out, Change{Kind: VersionRemoved, Model: n.Name, Version: v, Entry: n})
		case !inOld && inNew:
			out = append(out, Change{Kind: VersionAdded, Model: n.Name, Version: v, Entry: n})
		case inOld && inNew && !ov.Same(nv):
			out = append(out, Change{Kind: VersionChanged, Model: n.Name, Version: v, Entry: n})
		}
		if oe, ne := o.VersionErrors[v], n.VersionErrors[v]; errText(oe) != errText(ne) {
			out = append(out, Change{Kind: ModelError, Model: n.Name, Version: v, Entry: n, Err: ne})
		}
	}
	return out
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Watch polls the repository every interval (DefaultWatchInterval when <= 0)
// until ctx is done, and calls fn, from Watch's goroutine, with each change
// between successive scans (see Diff). The first scan, made at once, is the
// baseline and is not reported: call Scan first to load what is there, or
// use WatchFrom with that snapshot so that nothing changing in between is
// missed. Scans that fail (the root vanished or became unreadable) are
// reported once, as a ModelError with Model "", and the last good snapshot
// stays the baseline until a Scan succeeds again. Watch returns when ctx is done, and never calls fn
// after that.
func (r *Repository) Watch(ctx context.Context, interval time.Duration, fn func(Change)) {
	base, err := r.Scan()
	r.watch(ctx, base, err, interval, fn)
}

// WatchFrom is Watch with base as the baseline: the first poll reports every
// difference from base (a nil base reports every model as ModelAdded).
func (r *Repository) WatchFrom(ctx context.Context, base *Snapshot, interval time.Duration, fn func(Change)) {
	r.watch(ctx, base, nil, interval, fn)
}

func (r *Repository) watch(ctx context.Context, prev *Snapshot, scanErr error, interval time.Duration, fn func(Change)) {
	if fn == nil {
		return
	}
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	failing := false // the repository error has been reported
	report := func(err error) {
		if !failing && ctx.Err() == nil {
			failing = true
			fn(Change{Kind: ModelError, Err: err})
		}
	}
	if scanErr != nil {
		report(scanErr)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		snap, err := r.Scan()
		if err != nil {
			report(err)
			continue
		}
		failing = false
		for _, c := range Diff(prev, snap) {
			if ctx.Err() != nil {
				return
			}
			fn(c)
		}
		prev = snap
	}
}
