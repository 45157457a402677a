package modelrepo

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// FormatEnsemble is VersionEntry.Format of a pipeline's version: a model
// whose config is a pipeline (Triton's platform "ensemble", or config.yaml's
// pipeline:) has no model file of its own.
const FormatEnsemble = "ensemble"

// Fusion modes of a pipeline (PipelineConfig.Fuse).
const (
	// FuseAuto stitches the steps whose graphs can share one program into
	// one executable per bucket (the default).
	FuseAuto = "auto"
	// FuseNone runs every step as an execution of its own, as Triton runs an
	// ensemble (for comparisons and debugging).
	FuseNone = "none"
)

// PipelineConfig is a model served as a pipeline: steps that are other
// models of the repository or built-in steps, wired by named tensors as in
// Triton's ensemble_scheduling. The pipeline's own inputs and outputs are
// Config.Inputs and Config.Outputs. Steps are kept in an order where every
// step comes after the steps that compute its inputs.
type PipelineConfig struct {
	// Steps in dependency order.
	Steps []PipelineStep
	// Fuse is FuseAuto or FuseNone ("" means FuseAuto).
	Fuse string
}

// PipelineStep is one step of a pipeline: exactly one of Model and Builtin
// is set.
type PipelineStep struct {
	// Model names a model of the repository whose graph the step runs.
	Model string
	// Version is the model's version; 0 means the highest version its
	// version policy serves (Triton's -1).
	Version int64
	// Builtin names a built-in step (package pipeline lists them) and
	// Params its parameters, as config.yaml gives them.
	Builtin string
	Params  map[string]any
	// InputMap maps each input of the step (the model's input name, or the
	// built-in's) to the pipeline tensor that feeds it.
	InputMap map[string]string
	// OutputMap maps outputs of the step to the pipeline tensors they make;
	// outputs not named are dropped.
	OutputMap map[string]string
	// Separate runs the step as an execution of its own, never stitched
	// with its neighbours.
	Separate bool
	// Key is where the step is written in its config file, such as
	// "pipeline.steps[1]" or "ensemble_scheduling.step[0]", for errors.
	Key string
}

// Name is how the step is called in logs, metadata and errors: its model,
// else its built-in's name.
func (s PipelineStep) Name() string {
	if s.Model != "" {
		return s.Model
	}
	return s.Builtin
}

// rawPipeline is config.yaml's pipeline:.
type rawPipeline struct {
	Fuse  string    `yaml:"fuse"`
	Steps []rawStep `yaml:"steps"`
}

type rawStep struct {
	Model     string            `yaml:"model"`
	Version   int64             `yaml:"version"`
	Builtin   string            `yaml:"builtin"`
	Params    map[string]any    `yaml:"params"`
	InputMap  map[string]string `yaml:"input_map"`
	OutputMap map[string]string `yaml:"output_map"`
	Separate  bool              `yaml:"separate"`
}

// convert converts config.yaml's pipeline: (nil when there is none).
func (raw *rawPipeline) convert() *PipelineConfig {
	if raw == nil {
		return nil
	}
	pc := &PipelineConfig{Fuse: raw.Fuse}
	for i, s := range raw.Steps {
		pc.Steps = append(pc.Steps, PipelineStep{
			Model: s.Model, Version: s.Version, Builtin: s.Builtin, Params: s.Params,
			InputMap: maps.Clone(s.InputMap), OutputMap: maps.Clone(s.OutputMap), Separate: s.Separate,
			Key: fmt.Sprintf("pipeline.steps[%d]", i),
		})
	}
	return pc
}

// validatePipeline checks c's pipeline and puts its steps in dependency order:
// each step is a model or a built-in, every tensor a step reads is a
// pipeline input or made by exactly one step, every pipeline output is
// made, and no step depends on itself.
func (c *Config) validatePipeline(p *problems) {
	pc := c.Pipeline
	root := "pipeline"
	if len(pc.Steps) > 0 && strings.HasPrefix(pc.Steps[0].Key, "ensemble_scheduling") {
		root = "ensemble_scheduling"
	}
	switch pc.Fuse {
	case "", FuseAuto, FuseNone:
	default:
		p.add(root+".fuse", "want %s or %s, got %q", FuseAuto, FuseNone, pc.Fuse)
	}
	if len(pc.Steps) == 0 {
		p.add(root, "needs at least one step")
		return
	}
	if len(c.Inputs) == 0 {
		p.add("inputs", "a pipeline declares its inputs (name, dtype and dims of each)")
	}
	if len(c.Outputs) == 0 {
		p.add("outputs", "a pipeline declares its outputs (name, dtype and dims of each)")
	}
	made := c.madeTensors(p)
	missing := false
	for _, s := range pc.Steps {
		for _, in := range slices.Sorted(maps.Keys(s.InputMap)) {
			if t := s.InputMap[in]; made[t] == "" {
				missing = true
				p.add(s.Key+".input_map."+in, "no step or pipeline input makes tensor %q (made: %s)", t, strings.Join(slices.Sorted(maps.Keys(made)), ", "))
			}
		}
	}
	if missing {
		return
	}
	if ordered, cycle := orderSteps(c.Inputs, pc.Steps); cycle != "" {
		p.add(root, "the steps depend on each other in a cycle: %s", cycle)
	} else {
		pc.Steps = ordered
	}
}

// madeTensors checks every step and returns what makes each tensor (the
// pipeline's inputs, the steps' outputs), reporting tensors made twice
// and pipeline outputs nothing makes.
func (c *Config) madeTensors(p *problems) map[string]string {
	made := map[string]string{}
	for _, in := range c.Inputs {
		made[in.Name] = "the pipeline input"
	}
	for _, s := range c.Pipeline.Steps {
		validateStep(p, s)
		for _, out := range slices.Sorted(maps.Keys(s.OutputMap)) {
			t := s.OutputMap[out]
			if prev, dup := made[t]; dup {
				p.add(s.Key+".output_map."+out, "tensor %q is already made by %s", t, prev)
				continue
			}
			made[t] = s.Key + " (" + s.Name() + ")"
		}
	}
	for i, out := range c.Outputs {
		if _, ok := made[out.Name]; !ok && out.Name != "" {
			p.add(fmt.Sprintf("outputs[%d].name", i), "no step makes tensor %q (made: %s)", out.Name, strings.Join(slices.Sorted(maps.Keys(made)), ", "))
		}
	}
	return made
}

func validateStep(p *problems, s PipelineStep) {
	model, version := ".model", ".version"
	if strings.HasPrefix(s.Key, "ensemble_scheduling") {
		model, version = ".model_name", ".model_version"
	}
	switch {
	case s.Model == "" && s.Builtin == "":
		p.add(s.Key+model, "a step names a model or a built-in step (builtin)")
	case s.Model != "" && s.Builtin != "":
		p.add(s.Key, "a step is a model or a built-in step, not both (model %q, builtin %q)", s.Model, s.Builtin)
	case s.Model != "":
		if err := ValidateName(s.Model); err != nil {
			p.add(s.Key+model, "%s", strings.TrimPrefix(err.Error(), "modelrepo: "))
		}
		if s.Params != nil {
			p.add(s.Key+".params", "only built-in steps take params")
		}
	}
	if s.Version < 0 {
		p.add(s.Key+version, "must be >= 1 (or absent for the latest), got %d", s.Version)
	}
	validateMap(p, s.Key+".input_map", "input", s.InputMap)
	validateMap(p, s.Key+".output_map", "output", s.OutputMap)
}

// validateMap checks a step's input_map or output_map: not empty, no
// empty names.
func validateMap(p *problems, key, what string, m map[string]string) {
	if len(m) == 0 {
		p.add(key, "needs at least one %s", what)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k == "" || m[k] == "" {
			p.add(key, "names must not be empty (%q: %q)", k, m[k])
		}
	}
}

// orderSteps returns the steps sorted so that each comes after those making
// its inputs (stable: steps already in order stay so); cycle names the
// steps of a cycle when there is one.
func orderSteps(inputs []InputConfig, steps []PipelineStep) (ordered []PipelineStep, cycle string) {
	have := map[string]bool{}
	for _, in := range inputs {
		have[in.Name] = true
	}
	done := make([]bool, len(steps))
	for len(ordered) < len(steps) {
		progress := false
		for i, s := range steps {
			if done[i] || !ready(s, have) {
				continue
			}
			done[i], progress = true, true
			ordered = append(ordered, s)
			for _, t := range s.OutputMap {
				have[t] = true
			}
		}
		if !progress {
			var names []string
			for i, s := range steps {
				if !done[i] {
					names = append(names, s.Key+" ("+s.Name()+")")
				}
			}
			sort.Strings(names)
			return nil, strings.Join(names, ", ")
		}
	}
	return ordered, ""
}

func ready(s PipelineStep, have map[string]bool) bool {
	for _, t := range s.InputMap {
		if !have[t] {
			return false
		}
	}
	return true
}

// linkPipelines fills VersionEntry.Steps of every pipeline's versions with
// the versions of the models its steps run: the version a step names, else
// the highest its model's policy serves. A step whose model or version is
// not there (or is itself a pipeline) breaks the pipeline's version: it
// moves to VersionErrors, wrapping ErrNotFound or ErrLayout.
func (s *Snapshot) linkPipelines() {
	for i := range s.Models {
		m := &s.Models[i]
		if m.Config == nil || m.Config.Pipeline == nil || m.Err != nil {
			continue
		}
		var kept []VersionEntry
		for _, ve := range m.Versions {
			steps, err := s.stepVersions(m.Name, m.Config.Pipeline)
			if err != nil {
				if m.VersionErrors == nil {
					m.VersionErrors = map[int64]error{}
				}
				m.VersionErrors[ve.Version] = err
				continue
			}
			ve.Steps = steps
			kept = append(kept, ve)
		}
		m.Versions = kept
	}
}

func (s *Snapshot) stepVersions(name string, pc *PipelineConfig) ([]VersionEntry, error) {
	var out []VersionEntry
	for _, st := range pc.Steps {
		if st.Model == "" {
			continue
		}
		e, ok := s.Model(st.Model)
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: pipeline %s: %s: no model %q in the repository", ErrNotFound, name, st.Key, st.Model)
		case e.Config != nil && e.Config.Pipeline != nil:
			return nil, fmt.Errorf("%w: pipeline %s: %s: model %q is a pipeline itself; name its steps instead", ErrLayout, name, st.Key, st.Model)
		}
		if st.Version > 0 {
			v, ok := e.Version(st.Version)
			if !ok {
				return nil, fmt.Errorf("%w: pipeline %s: %s: model %q has no version %d", ErrNotFound, name, st.Key, st.Model, st.Version)
			}
			out = append(out, v)
			continue
		}
		sel := e.Selected()
		if len(sel) == 0 {
			return nil, fmt.Errorf("%w: pipeline %s: %s: model %q has no version to serve (%v)", ErrNotFound, name, st.Key, st.Model, e.Err)
		}
		out = append(out, sel[len(sel)-1])
	}
	return out, nil
}
