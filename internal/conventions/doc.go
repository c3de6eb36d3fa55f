// Package conventions holds no code: its tests check that the library keeps the shape
// docs/architecture.md (Conventions) describes, over the source of every package:
// every option type is a func(*config) error over an unexported config
// (options_test.go), and no package imports one of a higher layer (layers_test.go).
package conventions
