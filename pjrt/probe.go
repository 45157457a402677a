package pjrt

import (
	"fmt"
	"path/filepath"
)

// PluginAPIVersion loads the plugin at path, without creating a client, and
// returns the PJRT C API version it implements ("0.81") followed by its
// version attributes, as Client.PluginVersion formats them. It tells a
// plugin that cannot be loaded at all (a missing library, not a PJRT
// plugin) from one that loads but finds no device, which only Open reports.
func PluginAPIVersion(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("pjrt: plugin %s: %w", path, err)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	p, err := openPlugin(abs)
	if err != nil {
		return "", fmt.Errorf("pjrt: %w", err)
	}
	return p.apiVersion() + p.attributes, nil
}
