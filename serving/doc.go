// Package serving runs lowered programs: it compiles a lower.Program on a
// PJRT client, keeps the model's weights resident on the device (uploaded
// once and shared by every shape bucket's executable), and executes the
// compiled binary on request inputs.
package serving
