package serving

import (
	"context"
	"errors"
	"fmt"

	"github.com/xserve/xserve/modelrepo"
)

// Upload writes a model's uploaded files and config into the repository
// (modelrepo.Repository.Write: each version renamed into place whole) and
// then loads the model as Load does. A bad file path or config is
// ErrInvalidInput and writes nothing.
func (m *Manager) Upload(ctx context.Context, model string, up modelrepo.Upload) error {
	if err := m.repo.Write(model, up); err != nil {
		if errors.Is(err, modelrepo.ErrInvalidName) {
			return fmt.Errorf("%w: %w", ErrModelNotFound, err)
		}
		if errors.Is(err, modelrepo.ErrLayout) || errors.Is(err, modelrepo.ErrConfig) || errors.Is(err, modelrepo.ErrOutsideRoot) {
			return fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
		return err
	}
	return m.Load(ctx, model)
}
