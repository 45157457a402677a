package zoo

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// ManifestFile is the name of the manifest in each model directory.
const ManifestFile = "manifest.json"

// Formats are the model formats a zoo model is exported to, in the order
// they are checked: the key in Manifest.Formats and the file extension.
var Formats = []string{"onnx", "pt2"}

// Manifest describes one exported model directory (python/zoo/export.py
// writes it). Fields the check does not need (versions, exporter details)
// are kept in the file for people and ignored here.
type Manifest struct {
	Version int    `json:"manifest_version"`
	Model   string `json:"model"`
	// Variant is "small" (committed fixtures) or "full".
	Variant    string `json:"variant"`
	Note       string `json:"note"`
	Parameters int64  `json:"parameters"`
	// Versions of the exporting packages (torch, onnx, ...).
	Versions map[string]string `json:"versions"`
	// Formats maps "onnx" and "pt2" to how that file was exported.
	Formats map[string]FormatInfo `json:"formats"`
	// Cases are the reference cases, one per batch size.
	Cases []Case `json:"cases"`
}

// FormatInfo is one exported file of a model.
type FormatInfo struct {
	// File is the model file, relative to the model directory.
	File string `json:"file"`
	// Exporter says which exporter wrote it.
	Exporter string `json:"exporter"`
	// Error is set when the export itself failed; the format then fails.
	Error string `json:"error"`
	// DynamoError is the dynamo exporter's error when the ONNX file comes
	// from the TorchScript exporter fallback.
	DynamoError string `json:"dynamo_error"`
	// Ops are the ONNX op types or ATen targets in the exported graph.
	Ops []string `json:"ops"`
}

// Case is one reference run: inputs and PyTorch eager's outputs.
type Case struct {
	Batch int64 `json:"batch"`
	// Dims are the sizes of the dynamic dims ("batch", "sequence").
	Dims    map[string]int64 `json:"dims"`
	Inputs  []TensorFile     `json:"inputs"`
	Outputs []TensorFile     `json:"outputs"`
}

// TensorFile is a reference tensor stored as .npy.
type TensorFile struct {
	Name  string  `json:"name"`
	File  string  `json:"file"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

// ReadManifest reads and checks dir/manifest.json.
func ReadManifest(dir string) (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("zoo: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("zoo: %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("zoo: %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	return &m, nil
}

func (m *Manifest) validate() error {
	if m.Version != 1 {
		return fmt.Errorf("manifest_version %d, want 1 (regenerate with python/zoo/export.py)", m.Version)
	}
	if m.Model == "" {
		return errors.New("no model name")
	}
	if len(m.Cases) == 0 {
		return errors.New("no reference cases")
	}
	for i, c := range m.Cases {
		if len(c.Inputs) == 0 || len(c.Outputs) == 0 {
			return fmt.Errorf("case %d (batch %d) has %d inputs and %d outputs, want at least one of each", i, c.Batch, len(c.Inputs), len(c.Outputs))
		}
		for _, t := range append(append([]TensorFile(nil), c.Inputs...), c.Outputs...) {
			if t.File == "" || filepath.IsAbs(t.File) || t.File != filepath.Base(t.File) {
				return fmt.Errorf("case %d (batch %d): tensor %s: file %q must be a plain file name in the model directory", i, c.Batch, t.Name, t.File)
			}
		}
	}
	for f, info := range m.Formats {
		if info.File != "" && info.File != filepath.Base(info.File) {
			return fmt.Errorf("format %s: file %q must be a plain file name in the model directory", f, info.File)
		}
	}
	return nil
}

// ModelDirs returns the subdirectories of dir that hold a manifest, sorted.
// A zoo without any is an error that says how to make one.
func ModelDirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("zoo: %w (export one with make zoo or make zoo-fixtures)", err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name(), ManifestFile)); err == nil {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("zoo: no model directories with a %s in %s (export them with make zoo or make zoo-fixtures)", ManifestFile, dir)
	}
	sort.Strings(out)
	return out, nil
}
